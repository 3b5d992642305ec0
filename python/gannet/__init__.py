"""gannet: offline LLM inference on the CPU with bit-exact, batch-invariant results.

    from gannet import LLM, SamplingParams
    llm = LLM(model="path/to/checkpoint")
    outputs = llm.generate(["Hello, my name is"], SamplingParams(temperature=0.8, top_p=0.95))
    print(outputs[0].outputs[0].text)
"""

from .llm import LLM
from .outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput
from .sampling_params import GuidedDecodingParams, SamplingParams, StructuredOutputsParams

__all__ = ["LLM", "SamplingParams", "StructuredOutputsParams", "GuidedDecodingParams", "RequestOutput",
           "CompletionOutput", "Logprob", "RequestMetrics"]
__version__ = "0.1.0"
