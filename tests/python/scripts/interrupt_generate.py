# Ctrl-C during LLM.generate: a timer sends SIGINT to this process while a long batch runs.
# Prints what happened as JSON lines: the interrupt, then a short generate on the same LLM.
import json
import os
import signal
import sys
import threading
import time

import gannet

model = sys.argv[1]
llm = gannet.LLM(model=model, quiet=True)
long = gannet.SamplingParams(temperature=0, max_tokens=2000, ignore_eos=True)
started = []


class Bar:
    """Progress bar factory (use_tqdm=callable): the first finished request arms the timer."""

    def __init__(self, total, desc):
        pass

    def set_postfix_str(self, text, refresh=False):
        pass

    def update(self, k=1):
        if not started:
            started.append(time.monotonic())
            threading.Timer(0.2, lambda: os.kill(os.getpid(), signal.SIGINT)).start()

    def close(self):
        pass


# One quick request finishes first and arms the timer; the others run far longer than 0.2 s.
quick = gannet.SamplingParams(temperature=0, max_tokens=1)
t0 = time.monotonic()
try:
    llm.generate(["short"] + [f"long prompt {i}" for i in range(32)], [quick] + [long] * 32, use_tqdm=Bar)
    print(json.dumps({"interrupted": False}), flush=True)
except KeyboardInterrupt:
    print(json.dumps({"interrupted": True, "after_signal_s": time.monotonic() - started[0] - 0.2}), flush=True)

after = llm.generate(["after the interrupt"], gannet.SamplingParams(temperature=0, max_tokens=6), use_tqdm=False)
print(json.dumps({"token_ids": after[0].outputs[0].token_ids, "request_id": after[0].request_id}), flush=True)
