"""What generate() and chat() return: RequestOutput and CompletionOutput with vLLM's
attribute names, built from the engine's own structs."""

from dataclasses import dataclass, field
from typing import Callable, Dict, List, Optional, Union

__all__ = ["Logprob", "CompletionOutput", "RequestMetrics", "RequestOutput"]


@dataclass
class Logprob:
    """A token's log probability; `rank` is its place among the top logprobs (1 = most
    likely), None for a chosen token outside them."""

    logprob: float
    rank: Optional[int] = None
    decoded_token: Optional[str] = None


# Per position: token id -> Logprob (the chosen token first, then the top-N).
PositionLogprobs = Dict[int, Logprob]


@dataclass
class CompletionOutput:
    index: int
    text: str
    token_ids: List[int]
    cumulative_logprob: Optional[float]
    logprobs: Optional[List[PositionLogprobs]]
    finish_reason: Optional[str] = None
    stop_reason: Union[int, str, None] = None
    # LLM.chat only (a gannet addition): the assistant message the text stands for, as the
    # server's /v1/chat/completions returns it: {"role", "content", "reasoning_content"
    # (when the prompt opened reasoning), "tool_calls" (DeepSeek-V4 / V4.1 with tools)}.
    message: Optional[Dict] = None

    def finished(self) -> bool:
        return self.finish_reason is not None


@dataclass
class RequestMetrics:
    """Times in seconds of a monotonic clock (time.monotonic's), and what speculative
    decoding and the prefix cache did for the request."""

    arrival_time: float
    last_token_time: float
    first_scheduled_time: Optional[float]
    first_token_time: Optional[float]
    time_in_queue: Optional[float]
    finished_time: Optional[float]
    spec_steps: int = 0
    spec_drafted: int = 0
    spec_accepted: int = 0
    spec_drafted_at: List[int] = field(default_factory=list)
    spec_accepted_at: List[int] = field(default_factory=list)
    cached_tokens: int = 0


@dataclass
class RequestOutput:
    request_id: str
    prompt: Optional[str]
    prompt_token_ids: List[int]
    prompt_logprobs: Optional[List[Optional[PositionLogprobs]]]
    outputs: List[CompletionOutput]
    finished: bool
    metrics: Optional[RequestMetrics] = None
    num_cached_tokens: int = 0
    # gannet: the sampling seed used (given or drawn), to replay the request exactly.
    seed: int = 0
    # gannet: why the request failed after it was accepted (its grammar did not compile);
    # empty otherwise. A failed request's outputs have finish_reason "error".
    error: str = ""


def _position(core_pos, token_text: Callable[[int], Optional[str]]) -> PositionLogprobs:
    out: PositionLogprobs = {}
    ranks = {t.id: i + 1 for i, t in enumerate(core_pos.top)}
    out[core_pos.id] = Logprob(core_pos.logprob, ranks.get(core_pos.id), token_text(core_pos.id))
    for i, t in enumerate(core_pos.top):
        if t.id not in out:
            out[t.id] = Logprob(t.logprob, i + 1, token_text(t.id))
    return out


def _time(t: float) -> Optional[float]:
    return t if t > 0 else None


def from_core(o, prompt: Optional[str], want_logprobs: bool, want_prompt_logprobs: bool,
              token_text: Callable[[int], Optional[str]]) -> RequestOutput:
    """A RequestOutput from the engine's (gannet._core.RequestOutput)."""
    outputs = []
    for c in o.outputs:
        logprobs = [_position(p, token_text) for p in c.logprobs] if want_logprobs else None
        outputs.append(CompletionOutput(
            index=c.index, text=c.text, token_ids=list(c.token_ids), cumulative_logprob=c.cumulative_logprob,
            logprobs=logprobs, finish_reason=c.finish_reason or None, stop_reason=c.stop_reason))
    prompt_logprobs = None
    if want_prompt_logprobs:
        prompt_logprobs = [None if p is None else _position(p, token_text) for p in o.prompt_logprobs]
    m = o.metrics
    scheduled = _time(m.first_scheduled_time)
    metrics = RequestMetrics(
        arrival_time=m.arrival_time, last_token_time=m.finished_time or m.arrival_time,
        first_scheduled_time=scheduled, first_token_time=_time(m.first_token_time),
        time_in_queue=scheduled - m.arrival_time if scheduled is not None else None,
        finished_time=_time(m.finished_time), spec_steps=m.spec_steps, spec_drafted=m.spec_drafted,
        spec_accepted=m.spec_accepted, spec_drafted_at=list(m.spec_drafted_at),
        spec_accepted_at=list(m.spec_accepted_at), cached_tokens=m.cached_tokens)
    return RequestOutput(
        request_id=o.request_id, prompt=prompt, prompt_token_ids=list(o.prompt_token_ids),
        prompt_logprobs=prompt_logprobs, outputs=outputs, finished=o.finished, metrics=metrics,
        num_cached_tokens=m.cached_tokens, seed=o.seed, error=o.error)
