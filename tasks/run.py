"""The task `skillsft run <env>` builds: the report and, given a repo id, the publish task."""

import luigi

from skillsft.tasks.options_param import TaskListParameter


class RunEnv(luigi.WrapperTask):
    """Everything for one environment; the tasks it wants are composed by skillsft/graph.py."""

    work_dir = luigi.Parameter()
    wanted = TaskListParameter(default=())

    def requires(self) -> list[luigi.Task]:
        return list(self.wanted)
