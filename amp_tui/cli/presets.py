"""`amp-tui presets`: list the scenario, cluster, model, instance and GPU presets."""

from __future__ import annotations

from amp_tui.cli.output import json_text


def add_parser(sub) -> None:
    sub.add_parser("presets", help="list the presets").add_argument("--json", action="store_true")


def run(args) -> int:
    from amp_tui.core.spec.hardware import gpu_catalog, instance_catalog
    from amp_tui.core.spec.presets import PRESET_KINDS, describe_preset, preset_names

    listing = {kind: {name: describe_preset(kind, name) for name in preset_names(kind)} for kind in PRESET_KINDS}
    listing["instances"] = {name: _describe_instance(name, fields) for name, fields in instance_catalog().items()}
    listing["gpus"] = {name: gpu.description or name for name, gpu in gpu_catalog().items()}
    if args.json:
        print(json_text(listing))
        return 0
    for kind, entries in listing.items():
        print(f"{kind}:")
        width = max(len(name) for name in entries)
        for name, description in entries.items():
            print(f"  {name:<{width}}  {description}")
        print()
    return 0


def _describe_instance(name: str, fields: dict) -> str:
    price = fields.get("price_per_hour")
    return (f"{fields.get('provider', '')} {fields['gpus_per_node']} x {fields['gpu']}, "
            f"{fields['intra_node_bandwidth']} inside, {fields['inter_node_bandwidth']} network"
            + (f", ${price:,.2f}/hour on demand" if price is not None else "")).strip()
