# pytester's in-process runs drop modules first imported inside them; datasets cannot be imported twice
# (pyarrow extension types register once per process), so the heavy libraries are imported up front.
import datasets  # noqa: F401
import torch  # noqa: F401
import transformers  # noqa: F401
