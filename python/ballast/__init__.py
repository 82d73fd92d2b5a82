"""Ballast: straggler control for tensor-parallel training.

The PyTorch integration is ``ballast.torch``. The package may be split across the source
tree (pure Python) and a build tree (the compiled extension ``ballast.torch._C``);
``pkgutil.extend_path`` joins every ``ballast/`` folder on ``sys.path``.
"""
import pkgutil

__path__ = pkgutil.extend_path(__path__, __name__)
