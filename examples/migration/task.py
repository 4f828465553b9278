"""The migration LongTask (see README.md here): ``examples/migration/task.py:task``."""

from longtask.demo.migration import Inputs, task

__all__ = ["Inputs", "task"]
