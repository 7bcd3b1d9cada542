"""Training a retriever for tools: pairs from catalogs and labelled requests, contrastive fine-tuning, export.

`pairs` builds (request, tool) pairs and mines hard negatives with today's engine (no torch);
`trainer` fine-tunes a sentence encoder on them (torch and sentence-transformers, the `train`
extra, imported only there); the shipped file format lives in `toolsearch.model_file`.
"""
