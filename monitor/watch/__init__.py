"""`minirl watch`: follow another trainer's live log (TensorBoard, JSONL, MLflow, W&B)
into a run store through `Monitor`. sources.py and mlflow.py read, files.py follows a
file across truncation and rotation, loop.py assembles and stores steps, cli.py is the
command."""
