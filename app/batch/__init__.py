"""The OpenAI Batch API over any vLLM: files, batches, and the runner that
feeds their lines through admission in the lowest class (docs/batches.md)."""
