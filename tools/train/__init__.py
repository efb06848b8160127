"""Training pipeline of the embedded default model "tessera-tiny" (see README.md in this folder).

Stages: train_autoencoder.py (shape tokenizer) -> train_gpt.py (encodes the dataset with the trained
tokenizer, then trains the tiny CLIP text encoder + Cube GPT jointly) -> export_tiny.py
(assets/models/tessera-tiny/) -> evaluate.py (metrics for the model card). run_all.sh chains them.
"""
