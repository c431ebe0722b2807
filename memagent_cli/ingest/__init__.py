"""Sources to text: files, folders, PDFs and stdin become text segments with their provenance
(path, pages, character range). Knows nothing of models or tokens."""
