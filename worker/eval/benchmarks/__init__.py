"""Evaluation tasks (benchmarks), one idea per file; apart from the Celery tasks (worker/tasks.py):

task.py        what a task is once built: documents ready to score (Doc, Task)
registry.py    task names -> Tasks: the shipped files with our prompts, else lm-eval's own task
local_data.py  readers of the shipped evaluation files (NBL_DATA_DIR)
prompts.py     the prompts of each shipped task, copied from lm-eval's YAML
lmeval.py      lm-eval's own tasks, rendered by lm-eval, scored by our scorer
task_file.py   a user's own task: a JSONL file
suite.py       task suites (a paper's table) and their average
"""
