"""Tiny Qwen3-architecture models, built locally, for tests and the default CPU job.

:func:`build_tiny_model` writes an ordinary Hugging Face directory (``config.json``,
``generation_config.json``, ``model.safetensors``, ``tokenizer.json``, ``tokenizer_config.json``)
that ``AutoModelForCausalLM.from_pretrained`` and ``AutoTokenizer.from_pretrained`` load offline.
Nothing is downloaded: the weights are a random initialisation under ``torch.manual_seed(seed)``
and the tokenizer is a byte-level BPE trained in a second or so on text generated here, from real
TextArena games, the prompt templates and answer-style text (``\\boxed{...}``). The model knows
nothing until it is trained; it exists so that every stage of a run (generation, log-probs,
learning, checkpoints, LoRA) can be exercised with the real architecture on a laptop CPU.

The tokenizer follows Qwen3's conventions: ``<|endoftext|>`` pads, ``<|im_start|>``/``<|im_end|>``
delimit chat turns (``<|im_end|>`` ends a generation), ``<think>``/``</think>`` are whole tokens,
and the chat template renders ``<|im_start|>{role}\\n{content}<|im_end|>\\n``. Any string, emoji
and stray bytes included, encodes and decodes back unchanged.

Builds are deterministic: the same ``size`` and ``seed`` give a byte-identical ``tokenizer.json``
and ``model.safetensors``. :func:`tiny_model_path` caches one build per ``(size, seed)``::

    path = tiny_model_path("1m")            # ~/.cache/unstable/tiny-models/1m-seed0-v1
    model = AutoModelForCausalLM.from_pretrained(path)
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import textarena as ta
import torch
from tokenizers import AddedToken, Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import GenerationConfig, PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

from unstable.games.templates import render_prompt
from unstable.utils.paths import check_writable_dir

TINY_MODEL_VERSION = 1
"""Bump when the recipe changes (corpus, tokenizer, sizes): cached builds are keyed by it."""

TINY_VOCAB_SIZE = 2048
"""Tokens in the trained BPE, special and ``<think>`` tokens included."""

# hidden size, layers, attention heads, kv heads (GQA), head_dim, MLP intermediate size
TINY_SIZES: dict[str, dict[str, int]] = {
    "1m": dict(hidden_size=128, num_hidden_layers=4, num_attention_heads=4, num_key_value_heads=2,
               head_dim=32, intermediate_size=384),
    "10m": dict(hidden_size=256, num_hidden_layers=12, num_attention_heads=8, num_key_value_heads=4,
                head_dim=32, intermediate_size=768),
    "50m": dict(hidden_size=512, num_hidden_layers=16, num_attention_heads=8, num_key_value_heads=4,
                head_dim=64, intermediate_size=1536),
}

PAD_TOKEN = "<|endoftext|>"
IM_START = "<|im_start|>"
IM_END = "<|im_end|>"
THINK_TOKENS = ("<think>", "</think>")
_SPECIAL_TOKENS = (PAD_TOKEN, IM_START, IM_END)  # ids 0, 1, 2

CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)

# Qwen2/3's pre-tokenizer split: words with their leading space, single digits, punctuation runs.
_SPLIT_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}"
                  r"| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

# Games played for the corpus, each with the bracketed moves a random player picks from.
_NIM_MOVES = [f"[{pile} {n}]" for pile in range(3) for n in range(1, 6)]
_OFFERS = ["[Accept]", "[Deny]", "[Offer: 2 Wheat -> 1 Ore]", "[Offer: 3 Sheep, 2 Ore -> 5 Brick, 2 Sheep]",
           "I think this is fair for both of us. [Offer: 1 Brick -> 3 Wood]", "No thanks. [Deny]"]
_CORPUS_GAMES: dict[str, list[str]] = {
    "TicTacToe-v0-train": [f"[{i}]" for i in range(9)],
    "KuhnPoker-v0-train": ["[check]", "[bet]", "[call]", "[fold]"],
    "SimpleTak-v0-train": [f"[{i}]" for i in range(16)],
    "ConnectFour-v0-train": [f"[col {i}]" for i in range(7)],
    "Nim-v0-train": _NIM_MOVES,
    "SimpleNegotiation-v0-train": _OFFERS,
}
# Other offline two-player games: only their opening observations (rules, boards), for vocabulary.
_INSTRUCTION_GAMES = (
    "Alquerque", "Battleship", "Breakthrough", "Briscola", "Chopsticks", "ColonelBlotto", "Crusade",
    "GameOfPureStrategy", "GermanWhist", "Golf", "HighSociety", "IndianPoker", "IteratedMatchingPennies",
    "IteratedPrisonersDilemma", "IteratedRockPaperScissors", "IteratedTwoThirdsAverage",
    "IteratedUltimatumGame", "LiarsDice", "LinesOfAction", "MarketEntryGame", "MemoryGame", "NewRecruit",
    "Othello", "PigDice", "Poker", "PublicGoodsGame", "QuantumTicTacToe", "SantoriniBaseFixed",
    "SimpleBlindAuction", "Snake", "SpiteAndMalice", "Stratego", "Surround", "Tak", "TruthAndDeception",
    "TwoDollar", "UltimateTicTacToe", "WildTicTacToe",
)
_GAMES_PER_ENV = 6
_MAX_TURNS = 30
# Built-in templates only: a user's registered template must not change the tokenizer.
_CORPUS_TEMPLATES = ("default", "qwen3-zs", "qwen3-sp", "qwen3-reasoning")
_REASONS = ["Let me think.", "Let me think step by step.", "I should block my opponent.",
            "The center is usually strong.", "My card is high, so I will bet.", "I need to win this round."]


def _play_game(env_id: str, seed: int, moves: list[str]) -> list[str]:
    """Observations of one random game, and the moves the random players made."""
    rng = random.Random(f"{env_id}/{seed}")
    env = ta.make(env_id)
    env.reset(num_players=2, seed=seed)
    texts: list[str] = []
    done = False
    for _ in range(_MAX_TURNS):
        if done:
            break
        _, observation = env.get_observation()
        move = rng.choice(moves)
        texts.append(observation)
        texts.append(_answer(observation, move, rng))
        done, _ = env.step(move)
    env.close()
    return texts


def _answer(observation: str, move: str, rng: random.Random) -> str:
    """A prompt rendered with one of the Qwen-style templates, then an answer in the models' style."""
    template = rng.choice(_CORPUS_TEMPLATES)
    reason = rng.choice(_REASONS)
    boxed = f"\\boxed{{{move}}}"
    if template == "qwen3-reasoning":  # the prompt already opened the <think> block
        answer = f"\n{reason}\n</think>\n\n{boxed}"
    elif rng.random() < 0.5:
        answer = f"<think>\n{reason}\n</think>\n\n{boxed}"
    else:
        answer = f"{reason} The moves I can play include {move}. I will play {move}.\n{boxed}"
    return f"{render_prompt(template, observation[-800:])}{answer}{IM_END}\n"


def _opening_observation(env_id: str, seed: int) -> str:
    env = ta.make(env_id)
    env.reset(num_players=2, seed=seed)
    return env.get_observation()[1]


def _game_texts() -> list[str]:
    """Text from TextArena games, in a fixed order; the caller's global ``random`` state is kept."""
    state = random.getstate()  # TextArena's reset() seeds the global RNG
    texts: list[str] = []
    try:
        for env_id in sorted(_CORPUS_GAMES):
            for seed in range(_GAMES_PER_ENV):
                texts.extend(_play_game(env_id, seed, _CORPUS_GAMES[env_id]))
        for name in _INSTRUCTION_GAMES:
            texts.extend(_opening_observation(f"{name}-v0-train", seed) for seed in range(2))
    finally:
        random.setstate(state)
    return texts


def _corpus() -> Iterator[str]:
    """Training text for the tokenizer: games, prompts and answers, some arithmetic and unicode."""
    yield from _game_texts()
    for n in range(100):
        yield f"\\boxed{{{n}}} \\boxed{{[{n}]}} {n} + {n % 7} = {n + n % 7}\n"
    yield "Hello, world! Ünïcödé → ✓ 😀 日本語 Привет.\n\t  \r\n"


def _split_specials(texts: Iterator[str]) -> Iterator[str]:
    """Cut special tokens out of the text: the tokenizer matches them whole, BPE need not learn them."""
    pattern = re.compile("|".join(re.escape(t) for t in (*_SPECIAL_TOKENS, *THINK_TOKENS)))
    for text in texts:
        yield from (piece for piece in pattern.split(text) if piece)


def build_tokenizer() -> PreTrainedTokenizerFast:
    """Train the byte-level BPE on the generated corpus and wrap it for ``transformers``."""
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(_SPLIT_PATTERN), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
    ])
    tokenizer.decoder = decoders.ByteLevel()
    # Deterministic whatever the thread count: ids come from the sorted alphabet and merge ties are
    # broken by pair ids. (A continuing_subword_prefix or end_of_word_suffix would break that: such
    # tokens get ids in hash-map order, huggingface/tokenizers#1794.)
    trainer = trainers.BpeTrainer(
        vocab_size=TINY_VOCAB_SIZE - len(THINK_TOKENS),
        special_tokens=list(_SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(_split_specials(_corpus()), trainer=trainer)
    tokenizer.add_tokens([AddedToken(t, special=False, normalized=False) for t in THINK_TOKENS])
    return PreTrainedTokenizerFast(
        tokenizer_object=tokenizer,
        eos_token=IM_END,
        pad_token=PAD_TOKEN,
        chat_template=CHAT_TEMPLATE,
        model_max_length=4096,
        clean_up_tokenization_spaces=False,
    )


def tiny_config(size: str, vocab_size: int = TINY_VOCAB_SIZE) -> Qwen3Config:
    """The :class:`Qwen3Config` for one of :data:`TINY_SIZES`."""
    if size not in TINY_SIZES:
        raise ValueError(f"unknown tiny model size {size!r}; known sizes: {sorted(TINY_SIZES)}")
    pad_id = _SPECIAL_TOKENS.index(PAD_TOKEN)
    return Qwen3Config(
        vocab_size=vocab_size,
        max_position_embeddings=4096,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=[_SPECIAL_TOKENS.index(IM_END), pad_id],
        pad_token_id=pad_id,
        dtype="float32",
        **TINY_SIZES[size],
    )


def count_parameters(size: str) -> int:
    """Parameters of a ``size`` model (tied embeddings counted once), without allocating weights."""
    with torch.device("meta"):
        model = Qwen3ForCausalLM(tiny_config(size))
    return sum(p.numel() for p in model.parameters())


def _check_seed(seed: object) -> None:
    """A seed ``torch.manual_seed`` takes as given (it wraps a negative one silently)."""
    if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed < 2**64:
        raise ValueError(f"seed must be an integer in [0, 2**64), got {seed!r}")


def build_tiny_model(out_dir: str | os.PathLike, size: str = "1m", seed: int = 0, *,
                     overwrite: bool = False) -> Path:
    """Build a randomly initialised Qwen3 model and its tokenizer into ``out_dir``; returns it.

    Raises ``ValueError`` for an unknown ``size``, a ``seed`` outside ``torch.manual_seed``'s
    ``[0, 2**64)``, or an ``out_dir`` that is a file or can't be written, and ``FileExistsError``
    when ``out_dir`` is not empty, unless ``overwrite=True`` (which deletes what is there first).
    """
    config = tiny_config(size)
    _check_seed(seed)
    out = Path(out_dir)
    check_writable_dir("out_dir", out)  # a file there, or a place this user can't write: said now
    if out.exists() and any(out.iterdir()):
        if not overwrite:
            raise FileExistsError(f"{out} is not empty; pass overwrite=True to replace what is there")
        shutil.rmtree(out)
    tokenizer = build_tokenizer()
    if len(tokenizer) != config.vocab_size:
        raise RuntimeError(f"tokenizer has {len(tokenizer)} tokens, the config expects {config.vocab_size}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3ForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=None, eos_token_id=config.eos_token_id, pad_token_id=config.pad_token_id)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    _save_tokenizer(tokenizer, out)
    return out


def _save_tokenizer(tokenizer: PreTrainedTokenizerFast, out: Path) -> None:
    """Save, naming the class ``PreTrainedTokenizerFast`` so transformers 4.x loads it too (5.x
    writes its own ``TokenizersBackend``, which 4.x does not know)."""
    tokenizer.save_pretrained(out)
    config_file = out / "tokenizer_config.json"
    config = json.loads(config_file.read_text(encoding="utf-8"))
    config["tokenizer_class"] = "PreTrainedTokenizerFast"
    config_file.write_text(json.dumps(config, indent=2, sort_keys=True) + "\n", encoding="utf-8")


def tiny_model_path(size: str = "1m", seed: int = 0, cache_dir: str | os.PathLike | None = None) -> Path:
    """A cached build of ``build_tiny_model(size, seed)``, built on first use.

    The cache is ``cache_dir``, else ``$UNSTABLE_CACHE/tiny-models``, else
    ``~/.cache/unstable/tiny-models``. A build is written beside its final place and renamed into
    it, so an interrupted build never leaves a directory that looks complete.
    """
    tiny_config(size)  # unknown size or seed: fail before touching the cache
    _check_seed(seed)
    root = Path(cache_dir) if cache_dir is not None else _default_cache_root()
    final = root / f"{size}-seed{seed}-v{TINY_MODEL_VERSION}"
    if final.is_dir():
        return final
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", suffix=".tmp", dir=root))
    try:
        build_tiny_model(tmp, size, seed)
        os.replace(tmp, final)
    except OSError:
        if not final.is_dir():  # not a lost race with another builder: a real failure
            raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return final


def _default_cache_root() -> Path:
    env = os.environ.get("UNSTABLE_CACHE")
    if env:
        return Path(env) / "tiny-models"
    return Path.home() / ".cache" / "unstable" / "tiny-models"
