"""`amp-tui import`: a cluster as the scheduler and the driver print it, turned into a scenario.

What each tool prints is read by its own module: SLURM's `scontrol show node` and `sinfo -N -o`
(slurm.py), NVIDIA's `nvidia-smi topo -m` and `nvidia-smi --query-gpu=name,memory.total
--format=csv` (nvidia.py); which text is which is told from the text itself (text.py). gpus.py
names the catalog GPU a gres type or a device name is, links.py the link between a node's GPUs
from its topology (NVLink generation and count, PCIe path, what NCCL does with it), and cluster.py
puts it together: node groups, their figures, and a list of what the inputs cannot say. Pure: no
Textual, no torch.

May import: amp_tui.core.base, amp_tui.core.spec
"""
