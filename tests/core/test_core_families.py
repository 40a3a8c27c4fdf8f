"""families.py: parameter counts against published sizes, and a GPT block against the formulas in
reference/hardware.md (Narayanan et al. 2021 FLOPs and parameters, Korthikanti et al. 2022 activations)."""

import pytest

from amp_tui.core.spec.model import parse_model


def _model(name, e=2, **overrides):
    return parse_model({"preset": name, **overrides}, e)


@pytest.mark.parametrize("name, published", [
    ("llama2-7b", 6.74e9),
    ("llama2-13b", 13.0e9),
    ("llama2-70b", 69.0e9),
    ("llama3-8b", 8.03e9),
    ("llama3-70b", 70.6e9),
])
def test_llama_parameter_counts(name, published):
    assert _model(name).total_params == pytest.approx(published, rel=0.02)


@pytest.mark.parametrize("name, ffn", [("llama2-7b", 11008), ("llama2-13b", 13824)])
def test_llama_default_ffn_width(name, ffn):
    assert _model(name).shape["ffn_hidden_size"] == ffn


def _gpt_formula(shape):
    """Narayanan et al.'s parameter count, plus the untied output head (V h) our GPT models keep."""
    l, h, V, s = shape["num_layers"], shape["hidden_size"], shape["vocab_size"], shape["sequence_length"]
    return 12 * l * h**2 * (1 + 13 / (12 * h) + (V + s) / (12 * l * h)) + V * h


@pytest.mark.parametrize("name", ["gpt3-175b", "gpt3-13b", "gpt3-6.7b", "gpt3-1.3b", "gpt2-xl", "gpt-1t"])
def test_gpt_parameter_counts_match_the_formula(name):
    model = _model(name)
    assert model.total_params == pytest.approx(_gpt_formula(model.shape), rel=1e-5)


def test_gpt3_175b_is_175b():
    model = _model("gpt3-175b")
    V, h = model.shape["vocab_size"], model.shape["hidden_size"]
    assert model.total_params - V * h == pytest.approx(175e9, rel=0.01)


def test_bert_large_is_340m():
    model = _model("bert-large")
    V, h = model.shape["vocab_size"], model.shape["hidden_size"]
    # the MLM decoder's V x h weight is counted on the head's stage (tied to the embedding in BERT)
    assert model.total_params - V * h == pytest.approx(0.34e9, rel=0.03)


def _block(model):
    (block,) = [group for group in model.groups if group.kind == "block"]
    return block


@pytest.mark.parametrize("name", ["gpt3-1.3b", "gpt3-13b", "gpt2-xl"])
def test_gpt_block_flops(name):
    model = _model(name)
    s, h = model.shape["sequence_length"], model.shape["hidden_size"]
    # 72 B s l h^2 (1 + s / 6h) training FLOPs = 3 x forward; one layer, one sample, forward:
    assert _block(model).flops == pytest.approx(24 * s * h**2 * (1 + s / (6 * h)), rel=1e-12)


@pytest.mark.parametrize("name", ["gpt3-1.3b", "gpt3-13b", "gpt2-xl"])
def test_gpt_block_activations_korthikanti(name):
    model = _model(name, flash_attention=False)
    s, h, a = model.shape["sequence_length"], model.shape["hidden_size"], model.shape["num_heads"]
    block = _block(model)
    assert block.activation_bytes == pytest.approx(s * h * (34 + 5 * a * s / h), rel=1e-12)
    # under tensor parallelism t: s h (10 + 24 / t + 5 a s / (h t)), i.e. 10 s h bytes stay replicated
    assert block.activation_replicated_bytes == pytest.approx(10 * s * h, rel=1e-12)
    assert block.output_bytes == 2 * s * h


def test_flash_attention_drops_the_score_term():
    model = _model("gpt3-1.3b", flash_attention=True)
    s, h = model.shape["sequence_length"], model.shape["hidden_size"]
    assert _block(model).activation_bytes == pytest.approx(34 * s * h, rel=1e-12)


def test_fp32_doubles_activation_and_boundary_bytes():
    half, full = _model("gpt3-1.3b", 2), _model("gpt3-1.3b", 4)
    assert _block(full).activation_bytes == 2 * _block(half).activation_bytes
    assert _block(full).output_bytes == 2 * _block(half).output_bytes
    assert full.total_params == half.total_params


def test_gpt_block_params():
    model = _model("gpt3-13b")
    h = model.shape["hidden_size"]
    assert _block(model).params == 12 * h**2 + 13 * h
    assert _block(model).repeat == model.shape["num_layers"]
    assert model.num_layers == model.shape["num_layers"] + 2  # embedding, blocks, head
