"""torchrun (``torch.distributed.run``) as it runs on Debian 12: the same program and arguments,
with PyTorch 1.13's parsing of ``--redirects``/``--tee`` fixed for Python 3.11::

    python3 -m inagg.torchrun --nnodes 4 --nproc_per_node 1 --node_rank R \\
        --master_addr HOST --master_port PORT train.py ...

PyTorch 1.13 reads those options by iterating over its ``Std`` flags, and Python 3.11 no longer
yields the flags 0 (NONE) and 3 (ALL) when a Flag class is iterated: Debian 12's ``torchrun``
(python3-torch 1.13 on Python 3.11) fails at start with "AttributeError: 'NoneType' object has no
attribute 'get'" for every command line that leaves those options at their default. PyTorch 2.0
parses them with ``Std(int(value))``, as this module does before handing over to torchrun.
"""
import re
import sys

from torch.distributed.elastic.multiprocessing import api as _api


def _std_from_str(vm):
    if re.match(_api._VALUE_REGEX, vm):
        return _api.Std(int(vm))
    if re.match(_api._MAPPING_REGEX, vm):
        return {int(i): _api.Std(int(v)) for i, v in (m.split(":") for m in vm.split(","))}
    raise ValueError(f"{vm} does not match: <{_api._VALUE_REGEX}> or <{_api._MAPPING_REGEX}>")


def main(argv=None):
    if sys.version_info >= (3, 11) and _api.Std.from_str("0") is None:
        _api.Std.from_str = staticmethod(_std_from_str)
    from torch.distributed.run import main as torchrun_main
    torchrun_main(argv)


if __name__ == "__main__":
    main()
