"""Serve view: one row per machine, a bar over the model's layers where it holds them, and its use."""

from __future__ import annotations

from rich.text import Text
from textual.widgets import Static


class ServeBars(Static):
    DEFAULT_CSS = """
    ServeBars { height: auto; padding: 0 1; }
    """

    def show(self, result, width: int = 48) -> None:
        if result is None:
            self.update(Text("solving ..."))
            return
        net, placement = result.net, result.placement
        layers = net.num_layers
        util = result.utilisation()
        labels = [result.machine_label(m) for m in range(net.num_machines)]
        pad = max(len(label) for label in labels)
        text = Text()
        for m, label in enumerate(labels):
            a, k = placement.first[m], placement.count[m]
            cells = "".join("█" if k and a < (c + 1) * layers / width and a + k > c * layers / width else "·"
                            for c in range(width))
            text.append(f"{label:<{pad}} ")
            text.append(cells, style="green" if util[m] > 0.95 else "cyan" if k else "dim")
            text.append(f" {a:>3}-{a + k - 1:<3} {util[m]:>4.0%}\n" if k else "  idle\n")
        self.update(text)
