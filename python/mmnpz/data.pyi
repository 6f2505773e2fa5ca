# The training-data names are declared in mmnpz/__init__.pyi (the package exports them);
# mmnpz.data is the module that defines them at run time.
from . import Batch as Batch
from . import Dataset as Dataset
from . import Loader as Loader
from . import Sampler as Sampler
from . import concat as concat
from . import gather_fields as gather_fields

__all__ = ["Batch", "Dataset", "Loader", "Sampler", "concat", "gather_fields"]
