"""The transformers engine's own LoRA layers: each row of a batch on its adapter, equal to PEFT's LoRA
forward for that adapter alone; the scaling as PEFT computes it; what is not plain LoRA refused by
name; and a compiled static-cache decoding step that a new adapter or a new mix of rows does not
recompile."""

import json

import pytest
import torch
from conftest import make_adapter
from torch import nn

from unstable.inference.adapters import read_adapter
from unstable.inference.base import GenerationRequest, SamplingParams
from unstable.inference.multi_lora import MultiLora, MultiLoraLinear, lora_tensors
from unstable.inference.transformers_backend import TransformersBackend

PROMPT = "<|im_start|>user\nObservation: board [4]<|im_end|>\n<|im_start|>assistant\n"


class OneLayer(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(2, 2, bias=False)
        with torch.no_grad():
            self.proj.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0]], dtype=torch.float64))
        self.double()

    def forward(self, x):
        return self.proj(x)


def one_layer_adapter(**config):
    state = {"base_model.model.proj.lora_A.weight": torch.tensor([[0.1, 0.2]], dtype=torch.float64),
             "base_model.model.proj.lora_B.weight": torch.tensor([[0.3], [0.4]], dtype=torch.float64)}
    return {"r": 1, "lora_alpha": 0.7, **config}, state


@pytest.mark.parametrize(("config", "scaling"), [
    ({}, 0.7),  # lora_alpha / r
    ({"use_rslora": True, "lora_alpha": 0.3}, 0.3),  # lora_alpha / sqrt(r), r = 1
    ({"alpha_pattern": {"proj": 0.9}}, 0.9),  # the module's own alpha
    ({"alpha_pattern": {"other_proj": 0.9}}, 0.7),  # a pattern must match the end of the module's name
])
def test_a_row_gets_its_adapters_scaled_product_known_answer(config, scaling):
    """x = [0.5, 0.6], A = [0.1, 0.2], B = [0.3, 0.4]: A x = 0.17, so y = x + scaling * [0.051, 0.068]."""
    model = OneLayer()
    lora = MultiLora(model)
    lora.add("a", *one_layer_adapter(**config), source="a")
    x = torch.tensor([[[0.5, 0.6]], [[0.5, 0.6]]], dtype=torch.float64)  # [rows, tokens, features]
    lora.route(["a", None])
    y = model(x)
    expected = torch.tensor([0.5 + scaling * 0.051, 0.6 + scaling * 0.068], dtype=torch.float64)
    torch.testing.assert_close(y[0, 0], expected, rtol=0, atol=1e-15)
    torch.testing.assert_close(y[1, 0], x[1, 0], rtol=0, atol=0)  # the base row is untouched
    assert isinstance(model.proj, MultiLoraLinear)


def test_rslora_scaling_divides_by_the_square_root_of_the_rank():
    """PEFT's rsLoRA (Kalajdzievski 2023): alpha / sqrt(r). r = 4, alpha = 0.6: 0.3, where plain LoRA has 0.15."""
    model = OneLayer()
    a = torch.full((4, 2), 0.1, dtype=torch.float64)
    b = torch.full((2, 4), 0.1, dtype=torch.float64)
    state = {"base_model.model.proj.lora_A.weight": a, "base_model.model.proj.lora_B.weight": b}
    for rslora, scaling in ((True, 0.3), (False, 0.15)):
        tensors = lora_tensors({"r": 4, "lora_alpha": 0.6, "use_rslora": rslora}, state, model, "a")
        torch.testing.assert_close(tensors.modules["proj"][1], b * scaling, rtol=0, atol=1e-15)


def peft_logits(model_dir, adapter_path, ids):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    if adapter_path is not None:
        model = PeftModel.from_pretrained(model, adapter_path)
    with torch.no_grad():
        return model.eval()(input_ids=ids).logits


def peft_adapter(model_dir, out, seed, **config):
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    base = AutoModelForCausalLM.from_pretrained(model_dir)
    get_peft_model(base, LoraConfig(init_lora_weights=False, **config)).save_pretrained(str(out))
    return str(out)


def test_a_mixed_batch_equals_peft_for_each_rows_adapter(tiny_model_dir, tmp_path, monkeypatch):
    """Three adapters of different ranks, targets, rsLoRA and rank/alpha patterns, and base rows, in one
    batch (4 stacked slots, one of them unused): each row's logits are PEFT's for its adapter alone,
    by the eager per-adapter product and by the dense one a compiled step takes."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    paths = {
        "plain": peft_adapter(tiny_model_dir, tmp_path / "plain", 1, r=4, lora_alpha=7,
                              target_modules=["q_proj", "v_proj", "down_proj"]),
        "rslora": peft_adapter(tiny_model_dir, tmp_path / "rslora", 2, r=8, lora_alpha=5, use_rslora=True,
                               target_modules=["q_proj", "k_proj", "o_proj", "gate_proj", "up_proj"]),
        "patterns": peft_adapter(tiny_model_dir, tmp_path / "patterns", 3, r=2, lora_alpha=3,
                                 rank_pattern={"q_proj": 6}, alpha_pattern={"v_proj": 11},
                                 target_modules=["q_proj", "v_proj"]),
    }
    ids = torch.tensor([AutoTokenizer.from_pretrained(tiny_model_dir)(PROMPT)["input_ids"]])
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    lora = MultiLora(model)
    for name, path in paths.items():
        adapter = read_adapter(path)
        lora.add(name, adapter.config(), adapter.state_dict(), path)
    rows = ["patterns", None, "plain", "rslora", "plain"]
    lora.route(rows, dense=True)
    assert lora.routing.k == 4 and lora.routing.rank == 8
    with torch.no_grad():
        logits = model(input_ids=ids.repeat(len(rows), 1)).logits
    for i, name in enumerate(rows):
        expected = peft_logits(tiny_model_dir, paths.get(name), ids)[0]
        torch.testing.assert_close(logits[i], expected, rtol=1e-5, atol=1e-5)
    different = [float((logits[i] - logits[1]).abs().max()) for i in (0, 2, 3)]
    assert min(different) > 1e-3, different  # every adapter changes the model's outputs
    # eager passes take each adapter on its own rows; compiled ones the dense product over the stack
    with torch.no_grad(), monkeypatch.context() as m:
        m.setattr(torch.compiler, "is_compiling", lambda: True)
        dense = model(input_ids=ids.repeat(len(rows), 1)).logits
    torch.testing.assert_close(dense, logits, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize(("change", "message"), [
    ({"config": {"use_dora": True}}, r"DoRA \(use_dora\)"),
    ({"config": {"bias": "lora_only"}}, r"trained biases \(bias='lora_only'\)"),
    ({"config": {"modules_to_save": ["lm_head"]}}, r"modules_to_save \['lm_head'\]"),
    ({"config": {"peft_type": "IA3"}}, r"peft_type 'IA3'"),
    ({"config": {"r": 2}}, r"rank 2 for proj, but its lora_A has 1 rows"),
    ({"extra": {"base_model.model.proj.lora_magnitude_vector": torch.ones(2)}}, r"not LoRA A/B weights"),
    ({"rename": ("proj", "missing")}, r"fit no layer of this model .*missing.*nothing there"),
    ({"drop": "base_model.model.proj.lora_B.weight"}, r"lora_A but not both A and B for 'proj'"),
    ({"reshape": torch.zeros(1, 3, dtype=torch.float64)}, r"made for another model: proj takes \[2 x 2\]"),
])
def test_what_is_not_plain_lora_on_linear_layers_is_refused_by_name_and_changes_nothing(change, message):
    model = OneLayer()
    lora = MultiLora(model)
    config, state = one_layer_adapter(**change.get("config", {}))
    state.update(change.get("extra", {}))
    if "rename" in change:
        old, new = change["rename"]
        state = {k.replace(old, new): v for k, v in state.items()}
    if "drop" in change:
        del state[change["drop"]]
    if "reshape" in change:
        state["base_model.model.proj.lora_A.weight"] = change["reshape"]
    with pytest.raises(ValueError, match=message):
        lora.add("bad", config, state, source="bad")
    assert not lora.adapters and isinstance(model.proj, nn.Linear)


def test_lora_on_a_layer_that_is_not_linear_is_refused(tiny_model_dir, tmp_path):
    path = peft_adapter(tiny_model_dir, tmp_path / "norm", 1, r=2, target_modules=["q_proj", "embed_tokens"])
    from transformers import AutoModelForCausalLM

    adapter = read_adapter(path)
    lora = MultiLora(AutoModelForCausalLM.from_pretrained(tiny_model_dir))
    with pytest.raises(ValueError, match="not LoRA A/B weights"):  # PEFT saves lora_embedding_A/B for embeddings
        lora.add("e", adapter.config(), adapter.state_dict(), path)
    with pytest.raises(KeyError, match="'e' is not loaded"):
        lora.route(["e"])


def test_compiled_static_decoding_is_not_recompiled_for_a_new_adapter_or_a_new_mix(tiny_model_dir, adapters,
                                                                                    tmp_path):
    """transformers compiles the decoding step of a static-cache generate (here on CPU, as it does on CUDA):
    a third adapter loaded later and a new order of rows reuse the compiled graph, and every batch's
    tokens and log-probs equal the eager engine's with the dynamic cache."""
    import torch._dynamo.utils
    from transformers import CompileConfig

    third = make_adapter(tiny_model_dir, tmp_path / "a3", seed=3)
    greedy = SamplingParams(temperature=0, max_new_tokens=8)
    compiled = TransformersBackend(tiny_model_dir, kv_cache="static", max_batch_size=4, batch_wait_ms=0)
    config = CompileConfig(mode="default")
    config._compile_all_devices = True  # transformers' switch for compiling on CPU
    compiled.model.generation_config.compile_config = config
    eager = TransformersBackend(tiny_model_dir, kv_cache="dynamic", max_batch_size=4, batch_wait_ms=0)
    graphs = []
    try:
        for mix in ([adapters[0], adapters[1], None, adapters[0]], [None, third, adapters[0], third]):
            requests = [GenerationRequest(PROMPT, path, greedy) for path in mix]
            got, want = compiled.generate_batch(requests), eager.generate_batch(requests)
            graphs.append(torch._dynamo.utils.counters["stats"]["unique_graphs"])
            for g, w in zip(got, want, strict=True):
                assert g.sample.completion_ids == w.sample.completion_ids
                torch.testing.assert_close(torch.tensor(g.sample.completion_logprobs),
                                           torch.tensor(w.sample.completion_logprobs), rtol=0, atol=1e-5)
        assert graphs[1] == graphs[0] > 0, graphs  # compiled once, for the first batch
        assert compiled.decoding() == {"base": "static", "lora": "static"}
    finally:
        compiled.close()
        eager.close()


def test_the_config_file_is_what_sets_the_rank(tiny_model_dir, adapters, tmp_path):
    """An adapter whose config disagrees with its tensors is refused, not served with a wrong scaling."""
    import shutil

    copy = shutil.copytree(adapters[0], tmp_path / "lies")
    config = json.loads((copy / "adapter_config.json").read_text())
    config["rank_pattern"] = {"down_proj": 16}
    (copy / "adapter_config.json").write_text(json.dumps(config))
    adapter = read_adapter(copy)
    from transformers import AutoModelForCausalLM

    lora = MultiLora(AutoModelForCausalLM.from_pretrained(tiny_model_dir))
    with pytest.raises(ValueError, match=r"rank 16 for model\.layers\.\d\.mlp\.down_proj, but its lora_A has 4 rows"):
        lora.add("lies", adapter.config(), adapter.state_dict(), str(copy))
