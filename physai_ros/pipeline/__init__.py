"""Multi-model task pipelines (ROSA §3.3, docs/pipelines.md): a System 2 planner, a safety checker
and a progress monitor beside the System 1 action model, each with its own model, prompt, SLO,
rate and fallback."""
