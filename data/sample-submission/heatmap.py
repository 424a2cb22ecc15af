"""The notebook's last picture: your attention weights on Example 15.1, as a heatmap.

Nothing here is graded; the notebook's heatmap cell calls `show_weights`, so that the cell itself
shows two lines rather than the plotting.
"""
import numpy as np


def show_weights(head, positions):
    """Draw the weights that `head()` returns beside its output (receiving rows, contributing
    columns), titled by whether every row really is a mixture that sums to 1; or say in one line
    why there is nothing to draw yet."""
    try:
        _, weights = head()
        weights = np.asarray(weights, dtype=float)  # [T, T]
    except NameError as error:
        print(f"No heatmap yet: {error}. Run the setup cell and your solution cells first.")
        return
    except Exception as error:
        print(f"No heatmap yet: self_attention_head raised {error!r}")
        return
    size = len(positions)
    if weights.shape != (size, size):
        print(f"No heatmap: the weights have shape {weights.shape}, expected ({size}, {size}).")
        return
    import matplotlib.pyplot as plt

    totals = weights.sum(axis=1)  # [T]: each receiving row's total
    if np.all(weights >= 0) and np.allclose(totals, 1.0, rtol=0.0, atol=1e-9):
        title = "Example 15.1: each receiving row sums to 1"
    else:
        title = "Not attention weights: the rows sum to " + ", ".join(f"{total:.2f}" for total in totals)
    fig, ax = plt.subplots(figsize=(5, 4))
    image = ax.imshow(weights, cmap="Blues", vmin=0.0, vmax=max(1.0, float(np.nanmax(weights))))
    ax.set_xticks(range(size), labels=positions)
    ax.set_yticks(range(size), labels=positions)
    ax.set_xlabel("contributing key")
    ax.set_ylabel("receiving position")
    for i in range(size):
        for j in range(size):
            ax.text(j, i, f"{weights[i, j]:.3f}", ha="center", va="center")
    fig.colorbar(image, ax=ax, label="weight")
    ax.set_title(title)
    plt.show()
