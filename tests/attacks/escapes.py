# Terminal control sequences in everything a submission can put in its feedback: printed output at
# import and in a call, and an exception's message. OSC 0 retitles the window, OSC 52 writes the
# clipboard in many terminals, CSI 2J clears the screen. The base is the reference.
print("\x1b]0;qkvrt-title\x07\x1b[2J printed at import")
_escaping_head_facts = head_facts


def head_facts(t, d_k, d_v):
    print("\x1b]52;c;cWt2cnQ=\x07 printed in a call")
    raise RuntimeError("\x1b]52;c;cWt2cnQ=\x07\x1b[2J\r raised in a call")
