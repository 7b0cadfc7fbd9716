"""Semantic recall: embedding models (embeddings.py) for the store's vector indexes."""
