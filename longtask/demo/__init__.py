"""The migration demo: a LongTask that moves a sample service from sessions to JWT, on a
real git repository, with an offline scripted model (``longtask demo``). It is an example
built on the public API: it may import the root package ``longtask``, ops, runtime and the
rooms under runtime, never serve or cli (the CLI runs it)."""

from longtask.demo._model import MODEL_NAME, ScriptedChatModel, model_log

__all__ = ["MODEL_NAME", "ScriptedChatModel", "model_log"]
