# A script written for vLLM's offline API, as its quick-start shows it. The test runs it
# with the import line changed to gannet's and nothing else.
import sys

from vllm import LLM, SamplingParams

model = sys.argv[1]

prompts = [
    "Hello, my name is",
    "The president of the United States is",
    "The capital of France is",
    "The future of AI is",
]
sampling_params = SamplingParams(temperature=0.8, top_p=0.95, seed=0)

llm = LLM(model=model)
outputs = llm.generate(prompts, sampling_params)

for output in outputs:
    prompt = output.prompt
    generated_text = output.outputs[0].text
    print(f"Prompt: {prompt!r}, Generated text: {generated_text!r}")

greedy = SamplingParams(temperature=0, max_tokens=8)
for output in llm.generate(prompts[:2], greedy, use_tqdm=False):
    print(output.request_id, output.prompt_token_ids[:3], output.outputs[0].token_ids, output.outputs[0].finish_reason)
