"""vllm-gateway: the production front door for vLLM."""

__version__ = "0.2.0"
