"""TF_CONFIG as the Estimator's RunConfig read it: task, masters, replica counts and their checks.

Pure values: nothing here imports TensorFlow.

Example:

>>> cluster_settings({"session_master": "grpc://10.0.0.2:8470"})["master"]
'grpc://10.0.0.2:8470'
"""

from __future__ import annotations

import json
import os
from typing import Any


def read_tf_config() -> dict:
    """The TF_CONFIG environment variable, parsed (`{}` when unset)."""
    return json.loads(os.environ.get("TF_CONFIG") or "{}")


def _task_of(cluster: dict, task: dict, chief: str | None) -> tuple[str, int]:
    """`(task_type, task_id)` of TF_CONFIG's task, with the Estimator's checks and messages."""
    if chief is not None and len(cluster[chief]) > 1:
        raise ValueError(f'The "cluster" in TF_CONFIG must have only one "{chief}" node.')
    task_type, task_id = task.get("type"), task.get("index")
    if not task_type:
        raise ValueError('If "cluster" is set in TF_CONFIG, task type must be set.')
    if task_id is None:
        raise ValueError('If "cluster" is set in TF_CONFIG, task index must be set.')
    task_id = int(task_id)
    if task_id < 0:
        raise ValueError("Task index must be non-negative number.")
    note = "\n\nNote that these values may be coming from the TF_CONFIG environment variable."
    if task_type != "evaluator" and task_type not in cluster:
        raise ValueError(f"{task_type} is not a valid task_type in the cluster_spec:\n{cluster}{note}")
    if task_type != "evaluator" and not 0 <= task_id < len(cluster[task_type]):
        raise ValueError(
            f"{task_id} is not a valid task_id for task_type {task_type} in the cluster_spec:\n"
            f"{cluster}{note}"
        )
    return task_type, task_id


def cluster_settings(tf_config: dict) -> dict[str, Any]:
    """Task, masters and replica counts from TF_CONFIG, as the Estimator's RunConfig read them."""
    service = tf_config.get("service")
    if service is not None and not isinstance(service, dict):
        raise TypeError(f'If "service" is set in TF_CONFIG, it must be a dict. Given {type(service)}')
    cluster = tf_config.get("cluster") or {}
    task = tf_config.get("task") or {}
    if not cluster:
        task_type, task_id = task.get("type", "worker"), int(task.get("index", 0))
        if task_type != "worker":
            raise ValueError('If "cluster" is not set in TF_CONFIG, task type must be WORKER.')
        if task_id != 0:
            raise ValueError('If "cluster" is not set in TF_CONFIG, task index must be 0.')
        return {
            "task_type": task_type,
            "task_id": task_id,
            "master": tf_config.get("session_master", ""),
            "evaluation_master": tf_config.get("eval_session_master", ""),
            "is_chief": True,
            "num_worker_replicas": 1,
            "num_ps_replicas": 0,
            "global_id_in_cluster": 0,
            "cluster_spec": {},
            "service": service,
        }
    # The Estimator required a "chief" (or legacy "master") job. tf.distribute's
    # MultiWorkerMirroredStrategy clusters may list only workers, worker 0 acting as chief:
    # those are accepted here (a deliberate difference).
    chief = "master" if "master" in cluster else "chief" if "chief" in cluster else None
    if chief == "master" and "chief" in cluster:
        raise ValueError("If `master` node exists in `cluster`, job `chief` is not supported.")
    task_type, task_id = _task_of(cluster, task, chief)
    if task_type == "evaluator":
        if chief == "master":
            raise ValueError("If `master` node exists in `cluster`, task_type `evaluator` is not supported.")
        return {
            "task_type": task_type,
            "task_id": task_id,
            "master": "",
            "evaluation_master": tf_config.get("eval_session_master", ""),
            "is_chief": False,
            "num_worker_replicas": 0,
            "num_ps_replicas": 0,
            "global_id_in_cluster": None,
            "cluster_spec": {},
            "service": service,
        }
    single_node = len(cluster) == 1 and len(next(iter(cluster.values()))) == 1
    master = tf_config.get("session_master", "" if single_node else f"grpc://{cluster[task_type][task_id]}")
    ordered = ([chief] if chief else []) + sorted(job for job in cluster if job not in (chief, "ps"))
    ordered += ["ps"] if "ps" in cluster else []
    first_id = sum(len(cluster[job]) for job in ordered[: ordered.index(task_type)])
    return {
        "task_type": task_type,
        "task_id": task_id,
        "master": master,
        "evaluation_master": "",
        "is_chief": task_type == chief if chief else (task_type, task_id) == ("worker", 0),
        "num_worker_replicas": len(cluster.get("worker", [])) + len(cluster.get(chief, [])),
        "num_ps_replicas": len(cluster.get("ps", [])),
        "global_id_in_cluster": first_id + task_id,
        "cluster_spec": cluster,
        "service": service,
    }
