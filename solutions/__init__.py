"""Reference solutions: the single source of the student release."""
