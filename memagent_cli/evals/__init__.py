"""Measuring accuracy: data sets of questions run through the pipeline, scored as the paper does;
needle-in-a-haystack items."""
