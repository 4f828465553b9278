"""The migration demo: a LongTask that moves a sample service from sessions to JWT, on a
real git repository, with an offline scripted model (``longtask demo``)."""

from longtask.demo._model import MODEL_NAME, ScriptedChatModel, model_log

__all__ = ["MODEL_NAME", "ScriptedChatModel", "model_log"]
