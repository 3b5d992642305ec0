"""gannet.LLM: offline batch generation over the C++ engine, shaped like vLLM's LLM."""

import base64
import binascii
import io
import json
import os
import re
import threading
import time
from typing import Any, Dict, List, Optional, Sequence, Tuple, Union

from . import _core
from ._convert import as_bool, as_float, as_int, as_str, on_off_auto
from ._progress import progress_bar
from .outputs import RequestOutput, from_core
from .sampling_params import SamplingParams

__all__ = ["LLM"]

_OWNER = "LLM"

# EngineArgs fields (include/gannet/engine_args.h) settable as keyword arguments.
_MEMORY = "memory"
_ENGINE_FIELDS = {
    "threads": "int",
    "kv_cache_memory": _MEMORY,
    "max_num_seqs": "int",
    "max_num_batched_tokens": "int",
    "block_size": "int",
    "max_model_len": "int or None",
    "limit_images_per_prompt": "int",
    "max_image_pixels": "int",
    "enable_chunked_prefill": "bool",
    "watermark": "float",
    "async_scheduling": "bool",
    "quantize": "str or None",
    "exact_activations": "bool",
    "yoco_keep_tokens": "int or None",
    "yoco_replay": "on/off/None",
    "kv_fake_quant": "on/off/None",
    "kv_cache_dtype": "str",
    "weight_memory": "str",
    "speculative": "str",
    "num_speculative_tokens": "int",
    "speculative_verify": "str",
    "speculative_sampling": "str",
    "ngram_min": "int",
    "ngram_max": "int",
    "enable_prefix_caching": "on/off/None",
    "prefix_cache_dir": "str or None",
    "prefix_cache_disk_size": _MEMORY,
    "prefix_wait_steps": "int",
    "quiet": "bool",
}

# vLLM arguments that do not change what is computed, accepted for compatibility.
_NO_EFFECT = {"trust_remote_code", "enforce_eager", "disable_log_stats", "disable_custom_all_reduce",
              "disable_async_output_proc", "max_seq_len_to_capture", "tokenizer_mode", "task", "download_dir"}

# vLLM arguments gannet cannot honour, with the value that means "not used" and why.
_REFUSED = {
    "tensor_parallel_size": (1, "gannet's Python package runs one process; scale out with `mpirun gannet ...` "
                                "(README: Several processes)"),
    "pipeline_parallel_size": (1, "pipeline parallelism is not implemented"),
    "data_parallel_size": (1, "data parallelism runs under mpirun with the gannet command (README)"),
    "enable_expert_parallel": (False, "expert parallelism runs under mpirun with the gannet command (README)"),
    "gpu_memory_utilization": (None, "gannet runs on the CPU; size the KV cache with kv_cache_memory "
                                     "(bytes, or a string such as '4GiB')"),
    "swap_space": (None, "gannet has no CPU swap space for the KV cache: preempted requests are recomputed"),
    "cpu_offload_gb": (0, "weights are memory-mapped from the checkpoint; there is nothing to offload"),
    "dtype": ("auto", "weights compute in the checkpoint's formats; convert linears with quantize='fp8' or 'int8'"),
    "revision": (None, "gannet loads a local directory; check out the revision you want there"),
    "tokenizer_revision": (None, "gannet loads the tokenizer beside the model"),
    "hf_overrides": (None, "edit config.json instead (a field gannet cannot honour is refused there)"),
    "enable_lora": (False, "LoRA adapters are not implemented"),
    "skip_tokenizer_init": (False, "gannet always loads the checkpoint's tokenizer when it has one"),
    "max_logprobs": (20, "gannet returns at most 20 logprobs per position"),
    "expert_parallel": (None, "expert parallelism runs under mpirun with the gannet command (README)"),
    "ep_redundant_experts": (0, "expert parallelism runs under mpirun with the gannet command (README)"),
    "eplb_interval": (0, "expert parallelism runs under mpirun with the gannet command (README)"),
    "eplb_window": (0, "expert parallelism runs under mpirun with the gannet command (README)"),
}

# The engine's messages name its command-line flags; here the keyword arguments are meant.
_FLAG_NAMES = {"--no-prefix-caching": "enable_prefix_caching=False", "--enable-prefix-caching": "enable_prefix_caching",
               "--no-yoco-replay": "yoco_replay=False", "--no-kv-fake-quant": "kv_fake_quant=False",
               "--quantize": "quantize (quantization)"}


def _engine_message(text: str) -> str:
    def name(m: "re.Match[str]") -> str:
        return _FLAG_NAMES.get(m.group(0), m.group(1).replace("-", "_"))
    return re.sub(r"--([a-z][a-z0-9-]*)", name, text)


def _set_engine_field(args: "_core.EngineArgs", name: str, value: Any) -> None:
    kind = _ENGINE_FIELDS[name]
    if kind == "int":
        v = as_int(_OWNER, name, value)
    elif kind == "int or None":
        v = (0 if name == "max_model_len" else -1) if value is None else as_int(_OWNER, name, value)
    elif kind == "float":
        v = as_float(_OWNER, name, value)
    elif kind == "bool":
        v = as_bool(_OWNER, name, value)
    elif kind == "on/off/None":
        v = on_off_auto(_OWNER, name, value)
    elif kind == "str":
        v = as_str(_OWNER, name, value)
    elif kind == "str or None":
        if isinstance(value, os.PathLike):
            value = os.fspath(value)
        v = "" if value is None else as_str(_OWNER, name, value)
    elif kind == _MEMORY:
        if isinstance(value, str):
            v = _core.parse_memory_size(value)
        else:
            v = as_int(_OWNER, name, value)
            if v < 0:
                raise ValueError(f"{_OWNER}: {name} must be >= 0 bytes, got {v}")
    else:
        raise AssertionError(kind)
    if isinstance(v, int) and not isinstance(v, bool) and not -(2**63) <= v < 2**64:
        raise ValueError(f"{_OWNER}: {name} is out of range: {v}")
    try:
        setattr(args, name, v)
    except (TypeError, OverflowError):
        raise ValueError(f"{_OWNER}: {name} is out of range: {v!r}") from None


def _speculative_config(args: "_core.EngineArgs", cfg: Any) -> None:
    """vLLM's speculative_config dict: method (ngram or dspark), num_speculative_tokens,
    prompt_lookup_min / prompt_lookup_max (n-gram lengths)."""
    if cfg is None:
        return
    if not isinstance(cfg, dict):
        raise ValueError(f"{_OWNER}: speculative_config must be a dict, got {cfg!r}")
    known = {"method", "num_speculative_tokens", "prompt_lookup_min", "prompt_lookup_max", "model"}
    for k in cfg:
        if k not in known:
            raise ValueError(f"{_OWNER}: speculative_config[{k!r}] is not supported by gannet "
                             f"(it takes {', '.join(sorted(known))})")
    method = cfg.get("method", "ngram" if "prompt_lookup_max" in cfg else None)
    if method == "mtp":
        method = "dspark"
    if method not in ("ngram", "dspark"):
        raise ValueError(f"{_OWNER}: speculative_config['method'] must be 'ngram' or 'dspark', got {method!r}")
    if cfg.get("model") is not None:
        raise ValueError(f"{_OWNER}: speculative_config['model']: gannet drafts with n-grams or the checkpoint's "
                         "own DSpark drafter, not a separate model")
    args.speculative = method
    if "num_speculative_tokens" in cfg:
        _set_engine_field(args, "num_speculative_tokens", cfg["num_speculative_tokens"])
    if "prompt_lookup_min" in cfg:
        _set_engine_field(args, "ngram_min", cfg["prompt_lookup_min"])
    if "prompt_lookup_max" in cfg:
        _set_engine_field(args, "ngram_max", cfg["prompt_lookup_max"])


def _splitmix64(x: int) -> int:
    x = (x + 0x9E3779B97F4A7C15) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & 0xFFFFFFFFFFFFFFFF
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & 0xFFFFFFFFFFFFFFFF
    return x ^ (x >> 31)


Prompt = Union[str, List[int], Dict[str, Any]]


class _Tokenizer:
    """The checkpoint's tokenizer (llm.get_tokenizer()): encode and decode."""

    def __init__(self, engine: "_core.Engine"):
        self._engine = engine

    def encode(self, text: str, add_special_tokens: bool = True) -> List[int]:
        return list(self._engine.encode(as_str("encode", "text", text), as_bool("encode", "add_special_tokens",
                                                                                  add_special_tokens)))

    def decode(self, token_ids: Sequence[int], skip_special_tokens: bool = False) -> str:
        return self._engine.decode(list(token_ids), skip_special_tokens)

    def __call__(self, text: str, add_special_tokens: bool = True) -> Dict[str, List[int]]:
        return {"input_ids": self.encode(text, add_special_tokens)}


def _image_bytes(x: Any, where: str) -> bytes:
    """One image as its encoded file's bytes: bytes, a path, or a PIL.Image (saved as PNG)."""
    if isinstance(x, (bytes, bytearray, memoryview)):
        return bytes(x)
    if isinstance(x, (str, os.PathLike)):
        try:
            with open(x, "rb") as f:
                return f.read()
        except OSError as e:
            raise ValueError(f"{where}: image {os.fspath(x)!r}: {e.strerror}") from None
    if hasattr(x, "save") and hasattr(x, "mode"):  # PIL.Image: its pixels, losslessly
        buf = io.BytesIO()
        x.save(buf, format="PNG")
        return buf.getvalue()
    raise ValueError(f"{where}: an image must be a PIL.Image, a file path or the file's bytes, got {type(x).__name__}")


def _multi_modal_images(mm: Any, where: str) -> List[bytes]:
    if not isinstance(mm, dict) or set(mm) - {"image"}:
        raise ValueError(f"{where}: multi_modal_data takes {{'image': image or [images]}} (images only)")
    images = mm.get("image", [])
    if not isinstance(images, (list, tuple)):
        images = [images]
    return [_image_bytes(x, f"{where}: multi_modal_data['image'][{k}]") for k, x in enumerate(images)]


def _chat_images(conv: Any, where: str) -> List[bytes]:
    """The image_url parts of a conversation's messages, in order, as bytes (data: URLs only)."""
    out = []
    for mi, m in enumerate(conv):
        content = m.get("content")
        if not isinstance(content, list):
            continue
        for pi, part in enumerate(content):
            if not isinstance(part, dict) or part.get("type") != "image_url":
                continue
            field = f"{where}: messages[{mi}].content[{pi}].image_url"
            u = part.get("image_url")
            url = u.get("url") if isinstance(u, dict) else u
            if not isinstance(url, str) or not url.startswith("data:") or ";base64," not in url:
                raise ValueError(f"{field}: only data: URLs are taken (base64 PNG, JPEG or WebP); gannet fetches nothing")
            try:
                out.append(base64.b64decode(url.split(",", 1)[1], validate=True))
            except (ValueError, binascii.Error):
                raise ValueError(f"{field}: the data: URL's base64 does not decode") from None
    return out


class LLM:
    """An engine over one checkpoint directory, for offline batches.

    ``LLM(model=DIR, **engine_args)``: engine_args are gannet's engine settings by their
    names in include/gannet/engine_args.h (threads, kv_cache_memory, max_num_seqs,
    max_num_batched_tokens, block_size, max_model_len, enable_chunked_prefill,
    enable_prefix_caching, quantize, kv_cache_dtype, speculative, num_speculative_tokens,
    ...), after the GANNET_* environment variables as on the command line. vLLM's
    ``quantization`` and ``speculative_config`` map onto them; ``seed`` makes the seeds of
    requests that give none reproducible (derived from it and the request's number);
    arguments that would change results and that gannet cannot honour are refused.
    """

    def __init__(self, model: str, *, tokenizer: Optional[str] = None, seed: Optional[int] = None, **kwargs: Any):
        args = _core.EngineArgs()
        args.apply_environment()
        args.model = as_str(_OWNER, "model", os.fspath(model) if isinstance(model, os.PathLike) else model)
        if tokenizer is not None and tokenizer != model:
            raise ValueError(f"{_OWNER}: tokenizer={tokenizer!r}: gannet uses the tokenizer in the model directory")
        self._seed = None if seed is None else as_int(_OWNER, "seed", seed)
        if self._seed is not None and not 0 <= self._seed < 2**64:
            raise ValueError(f"{_OWNER}: seed must be in [0, 2**64), got {self._seed}")
        if "quantization" in kwargs:
            if "quantize" in kwargs:
                raise ValueError(f"{_OWNER}: give quantize or quantization, not both")
            kwargs["quantize"] = kwargs.pop("quantization")
        _speculative_config(args, kwargs.pop("speculative_config", None))
        mm = kwargs.pop("limit_mm_per_prompt", None)  # vLLM's spelling: {"image": N}
        if mm is not None:
            if not isinstance(mm, dict) or set(mm) - {"image"}:
                raise ValueError(f"{_OWNER}: limit_mm_per_prompt takes {{'image': N}} (gannet's models take images only)")
            if "image" in mm:
                if "limit_images_per_prompt" in kwargs:
                    raise ValueError(f"{_OWNER}: give limit_mm_per_prompt or limit_images_per_prompt, not both")
                kwargs["limit_images_per_prompt"] = mm["image"]
        for name, value in kwargs.items():
            if name in _ENGINE_FIELDS:
                _set_engine_field(args, name, value)
            elif name in _NO_EFFECT:
                continue
            elif name in _REFUSED:
                default, why = _REFUSED[name]
                if value != default and value is not None:
                    raise ValueError(f"{_OWNER}: {name}={value!r} is not supported: {why}")
            else:
                raise TypeError(f"LLM got an unexpected keyword argument {name!r}")
        try:
            args.validate()
            self._engine = _core.Engine(args)
        except ValueError as e:
            raise ValueError(_engine_message(str(e))) from None
        self._lock = threading.Lock()
        self._next_id = 0
        self._token_text: Dict[int, str] = {}

    # -- vLLM's offline API ---------------------------------------------------------------

    def get_tokenizer(self) -> _Tokenizer:
        if not self._engine.has_tokenizer:
            raise ValueError(f"{self._engine.args.model} has no tokenizer.json")
        return _Tokenizer(self._engine)

    def generate(self, prompts: Union[Prompt, Sequence[Prompt], None] = None,
                 sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
                 use_tqdm: Any = True, lora_request: Any = None, *,
                 prompt_token_ids: Union[List[int], List[List[int]], None] = None) -> List[RequestOutput]:
        """Runs every prompt as one continuous batch; outputs come back in input order.

        prompts: a string, a list of token ids, a dict with "prompt" or
        "prompt_token_ids", or a list of any of these. sampling_params: one for all, or one
        per prompt (None: SamplingParams()). Ctrl-C stops the batch: its requests are
        aborted and KeyboardInterrupt propagates; the LLM stays usable.
        """
        if lora_request is not None:
            raise ValueError(f"{_OWNER}.generate: lora_request is not supported (no LoRA adapters)")
        if prompt_token_ids is not None:
            if prompts is not None:
                raise ValueError(f"{_OWNER}.generate: give prompts or prompt_token_ids, not both")
            prompts = prompt_token_ids
        items = self._prompts(prompts)
        return self._run(items, self._params_for(sampling_params, len(items)), use_tqdm)

    def chat(self, messages: Union[List[Dict[str, Any]], List[List[Dict[str, Any]]]],
             sampling_params: Union[SamplingParams, Sequence[SamplingParams], None] = None,
             use_tqdm: Any = True, lora_request: Any = None, chat_template: Optional[str] = None,
             chat_template_content_format: str = "auto", add_generation_prompt: bool = True,
             continue_final_message: bool = False, tools: Optional[List[Dict[str, Any]]] = None,
             chat_template_kwargs: Optional[Dict[str, Any]] = None) -> List[RequestOutput]:
        """Generates replies to one conversation (a list of {"role", "content"} dicts) or a
        list of conversations, formatted with the checkpoint's chat template (or
        `chat_template`, a Jinja template's text). Each output's `message` is the reply as
        the server returns it: content, reasoning_content and, for DeepSeek-V4 / V4.1 with
        `tools`, tool_calls read back from the output (not set with `chat_template`)."""
        if lora_request is not None:
            raise ValueError(f"{_OWNER}.chat: lora_request is not supported (no LoRA adapters)")
        if continue_final_message:
            raise ValueError(f"{_OWNER}.chat: continue_final_message is not supported")
        if chat_template_content_format not in ("auto", "string"):
            raise ValueError(f"{_OWNER}.chat: chat_template_content_format must be 'auto' or 'string', "
                             f"got {chat_template_content_format!r}")
        if not isinstance(messages, (list, tuple)) or not messages:
            raise ValueError(f"{_OWNER}.chat: messages must be a non-empty list of messages or of conversations")
        conversations = messages if isinstance(messages[0], (list, tuple)) else [messages]
        add_gen = as_bool(f"{_OWNER}.chat", "add_generation_prompt", add_generation_prompt)
        if chat_template is not None:
            as_str(f"{_OWNER}.chat", "chat_template", chat_template)
        kwargs_json = json.dumps(chat_template_kwargs or {}, ensure_ascii=False)
        tools_json = json.dumps(tools, ensure_ascii=False) if tools is not None else "null"
        items = []
        for i, conv in enumerate(conversations):
            if not isinstance(conv, (list, tuple)) or not all(isinstance(m, dict) for m in conv):
                raise ValueError(f"{_OWNER}.chat: conversation {i} must be a list of message dicts")
            try:
                text = self._engine.render_chat(json.dumps(list(conv), ensure_ascii=False), add_gen, kwargs_json,
                                                tools_json, chat_template)
            except (TypeError, ValueError) as e:
                raise ValueError(f"{_OWNER}.chat: conversation {i}: {e}") from None
            # The template writes the BOS token itself. Image parts (data: URLs) are the
            # encoder's image markers, each the placeholder id the engine expands.
            images = _chat_images(conv, f"{_OWNER}.chat: conversation {i}")
            if not images:
                items.append((text, list(self._engine.encode(text, False)), None))
                continue
            if self._engine.image_token_id < 0:
                raise ValueError(f"{_OWNER}.chat: conversation {i}: this model takes no images (no vision tower)")
            ids = list(self._engine.encode_with_image_markers(text, False))
            if ids.count(self._engine.image_token_id) != len(images):
                raise ValueError(f"{_OWNER}.chat: conversation {i}: the chat format placed "
                                 f"{ids.count(self._engine.image_token_id)} image(s) for {len(images)} image part(s)")
            items.append((text, ids, images))
        results = self._run(items, self._params_for(sampling_params, len(items)), use_tqdm)
        if chat_template is None:  # read the answers back as the server does
            with_tools = bool(tools)
            for (text, _, _), r in zip(items, results):
                for o in r.outputs:
                    o.message = json.loads(self._engine.parse_chat_output(text, o.text, with_tools))
        return results

    # -- internals ------------------------------------------------------------------------

    def _prompts(self, prompts: Any) -> List[Tuple[Optional[str], Optional[List[int]], Optional[List[bytes]]]]:
        """(text, token ids, images) per prompt; exactly one of the first two is set."""
        where = f"{_OWNER}.generate"
        if prompts is None:
            raise ValueError(f"{where}: no prompts given")
        if isinstance(prompts, (str, dict)):
            prompts = [prompts]
        elif isinstance(prompts, (list, tuple)) and prompts and all(
                isinstance(p, int) and not isinstance(p, bool) for p in prompts):
            prompts = [list(prompts)]  # one prompt of token ids
        elif not isinstance(prompts, (list, tuple)):
            raise ValueError(f"{where}: prompts must be a string, a list of token ids, a dict with 'prompt' or "
                             f"'prompt_token_ids', or a list of these; got {type(prompts).__name__}")
        out = []
        for i, p in enumerate(prompts):
            images = None
            if isinstance(p, dict):
                unknown = set(p) - {"prompt", "prompt_token_ids", "multi_modal_data"}
                if unknown:
                    raise ValueError(f"{where}: prompt {i}: unsupported key(s) {sorted(unknown)} "
                                     "(gannet takes 'prompt' or 'prompt_token_ids', and 'multi_modal_data')")
                if "multi_modal_data" in p:
                    images = _multi_modal_images(p["multi_modal_data"], f"{where}: prompt {i}")
                if ("prompt" in p) == ("prompt_token_ids" in p):
                    raise ValueError(f"{where}: prompt {i}: give exactly one of 'prompt' and 'prompt_token_ids'")
                p = p["prompt"] if "prompt" in p else p["prompt_token_ids"]
                if not isinstance(p, (str, list, tuple)):
                    raise ValueError(f"{where}: prompt {i} must be a string or a list of token ids")
            if isinstance(p, str):
                out.append((p, None, images))
            elif isinstance(p, (list, tuple)):
                ids = []
                for j, t in enumerate(p):
                    if isinstance(t, bool) or not isinstance(t, int):
                        raise ValueError(f"{where}: prompt {i}: token {j} must be an integer id, got {t!r}")
                    if not 0 <= t < 2**31:
                        raise ValueError(f"{where}: prompt {i}: token id {t} is outside the vocabulary")
                    ids.append(t)
                out.append((None, ids, images))
            else:
                raise ValueError(f"{where}: prompt {i} must be a string, a list of token ids or a dict, "
                                 f"got {type(p).__name__}")
        return out

    @staticmethod
    def _params_for(sampling_params: Any, n: int) -> List[SamplingParams]:
        if sampling_params is None:
            return [SamplingParams()] * n
        if isinstance(sampling_params, SamplingParams):
            return [sampling_params] * n
        if isinstance(sampling_params, (list, tuple)):
            if len(sampling_params) != n:
                raise ValueError(f"{_OWNER}: {len(sampling_params)} SamplingParams for {n} prompts")
            for i, p in enumerate(sampling_params):
                if not isinstance(p, SamplingParams):
                    raise ValueError(f"{_OWNER}: sampling_params[{i}] is not a SamplingParams")
            return list(sampling_params)
        raise ValueError(f"{_OWNER}: sampling_params must be a SamplingParams or a list of them, "
                         f"got {type(sampling_params).__name__}")

    def _text_of(self, token_id: int) -> str:
        t = self._token_text.get(token_id)
        if t is None:
            t = self._engine.token_bytes(token_id).decode("utf-8", "replace") if self._engine.has_tokenizer else ""
            self._token_text[token_id] = t
        return t

    def _run(self, items, params: List[SamplingParams], use_tqdm: Any) -> List[RequestOutput]:
        if not items:
            return []
        # Everything is checked before anything is queued, so a bad input leaves no work behind.
        cores = []
        for i, p in enumerate(params):
            try:
                core = p._to_core()
            except ValueError as e:
                raise ValueError(f"sampling_params[{i}]: {e}" if len(set(map(id, params))) > 1 else str(e)) from None
            cores.append(core)
        with self._lock:
            return self._run_locked(items, params, cores, use_tqdm)

    def _run_locked(self, items, params, cores, use_tqdm) -> List[RequestOutput]:
        engine = self._engine
        index: Dict[str, int] = {}
        results: List[Optional[RequestOutput]] = [None] * len(items)
        bar = None
        try:
            for i, ((text, ids, images), core) in enumerate(zip(items, cores)):
                rid = str(self._next_id)
                self._next_id += 1
                if self._seed is not None and core.seed is None:
                    core = _core.SamplingParams(core)
                    core.seed = _splitmix64(self._seed ^ _splitmix64(int(rid)))
                try:
                    if images:
                        engine.add_request(rid, text if ids is None else ids, core, images)
                    elif ids is None:
                        engine.add_request(rid, text, core)
                    else:
                        engine.add_request(rid, ids, core)
                except ValueError as e:
                    raise ValueError(f"prompt {i}: " + _engine_message(re.sub(r"^request '[^']*': ", "", str(e)))) from None
                index[rid] = i
            bar = self._bar(use_tqdm, len(items))
            t0 = time.monotonic()
            prompt_tokens = out_tokens = 0
            while engine.has_unfinished():
                for o in engine.step():
                    i = index.pop(o.request_id, None)
                    if i is None:
                        continue
                    p = params[i]
                    results[i] = from_core(o, items[i][0], p.logprobs is not None, p.prompt_logprobs is not None,
                                           self._text_of)
                    prompt_tokens += len(o.prompt_token_ids)
                    out_tokens += sum(len(c.token_ids) for c in o.outputs)
                    secs = max(time.monotonic() - t0, 1e-9)
                    bar.set_postfix_str(f"est. speed input: {prompt_tokens / secs:.2f} toks/s, "
                                        f"output: {out_tokens / secs:.2f} toks/s", refresh=False)
                    bar.update(1)
        finally:
            # Whatever stopped the loop (Ctrl-C, an error), none of this call's requests stays queued.
            for rid in index:
                engine.abort(rid)
            if bar is not None:
                bar.close()
        return results  # type: ignore[return-value]

    @staticmethod
    def _bar(use_tqdm: Any, total: int):
        if callable(use_tqdm):
            return use_tqdm(total=total, desc="Processed prompts")
        return progress_bar(total, as_bool(f"{_OWNER}.generate", "use_tqdm", use_tqdm))
