"""Small serving scenarios built in code, for tests."""

from amp_tui.serving.spec import parse_serving_scenario


def scenario(groups, layers=12, links=None, coordinator=None):
    """`groups`: [(count, {k: tokens_per_s}, region or None)]; a model of `layers` layers."""
    nodes = []
    for count, table, region in groups:
        node = {"count": count, "gpu": "T4", "gpus_per_node": 1, "intra_node_bandwidth": "16 GB/s",
                "inter_node_bandwidth": "1 GB/s", "serving_throughput": table}
        if region:
            node["region"] = region
        nodes.append(node)
    cluster = {"name": "test", "nodes": nodes}
    if links:
        cluster["links"] = links
    if coordinator:
        cluster["coordinator"] = coordinator
    model = {"name": "toy", "family": "llama", "hidden_size": 512, "num_layers": layers, "num_heads": 8,
             "sequence_length": 128, "vocab_size": 1000}
    return parse_serving_scenario({"name": "toy", "cluster": cluster, "model": model, "serving": {}})
