"""Layer selection, layer indices and per-layer state after shrinking, on real architectures.

Each test is one class of layer bookkeeping the shrinker got wrong: the config built, but kept
every layer or pointed past the shrunk stack; the shrunk config is checked and a forward on cpu
passes.
"""

from __future__ import annotations

from contracts.records import ModelSpec
from harness.build.models import resolve_config
from tests.harness.build.shrink_helpers import forward


def test_an_index_list_naming_every_layer_does_not_pin_every_layer():
    """LFM2's default `full_attn_idxs` is 0..31, as long as the stack: read as per-layer values it
    gave each layer a kind of its own and all 32 layers were kept (3.9M parameters at `full`)."""
    config = forward("lfm2", "Lfm2ForCausalLM")
    assert config.num_hidden_layers == 2
    assert config.full_attn_idxs == [0, 1] and len(config.layer_types) == 2


def test_negative_taps_into_a_shrunk_vision_tower_stay_inside_it():
    """VipLLaVA concatenates the hidden states of layers -2, -5, -8, -11 and 6 of its 24-layer
    CLIP tower; the tower keeps 2 layers, so each tap must index its 3 hidden states (and the
    projector keeps taking 5 of them)."""
    config = forward("vipllava", "VipLlavaForConditionalGeneration")
    n = config.vision_config.num_hidden_layers
    taps = config.vision_feature_layers
    assert len(taps) == 5
    assert all(-n <= t < n for t in taps)


def test_a_per_layer_list_of_source_layers_keeps_each_readers_source():
    """Kolibri-1.1's `kv_source_layers` names, per layer, the earlier layer whose K/V it reads (its
    own index when it computes them): read as plain values every layer differed (no level built);
    a layer's kind is own / read by others / reads another, a kept reader keeps its source, and
    the entries are remapped into the kept layers (its config validates exactly that)."""
    config = forward("kolibri1_1", "Kolibri1_1ForCausalLM")
    src = config.kv_source_layers
    assert config.num_hidden_layers < 50 and len(src) == config.num_hidden_layers
    assert any(s != i for i, s in enumerate(src))  # a reader is kept
    assert all(src[s] == s and config.layer_types[s] == config.layer_types[i] for i, s in enumerate(src))


def test_a_config_with_two_text_configs_resolves():
    """MusicGen has a text encoder and a decoder, so `get_text_config()` is ambiguous and raised
    while the config was prepared: the type did not shrink at all."""
    config = resolve_config(ModelSpec("catalog/musicgen", "musicgen", "MusicgenForCausalLM"))
    assert config._shrink_level == "full"


def test_a_forward_that_reads_use_cache_from_the_config_builds_no_cache():
    """GraniteMoeHybrid's forward takes no `use_cache` argument, so the config's decided: its
    default stack is all Mamba, and the cache it built could not give the attention mask's sizes.
    Shrunk configs run without a cache, as the inputs ask where the forward names it."""
    config = forward("granitemoehybrid", "GraniteMoeHybridForCausalLM")
    assert config.use_cache is False and set(config.layer_types) == {"linear_attention"}
