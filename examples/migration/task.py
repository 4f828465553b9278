"""The migration LongTask (see README.md here): ``examples/migration/task.py:task``."""

from longtask.demo.migration import Inputs, auto_task, task

__all__ = ["Inputs", "auto_task", "task"]
