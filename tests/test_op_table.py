"""gpuengine/op_table.py: every op the engine knows has one row, in one family, naming its four rules."""

from gpuengine import op_table
from gpuengine.model import ops
from gpuengine.model.folding import FOLDERS
from gpuengine.model.validate import RULES
from gpuengine.reference import BUILTIN_OPS, CUSTOM_OPS


def test_every_op_with_a_rule_has_a_row():
    known = set(RULES) | set(FOLDERS) | set(BUILTIN_OPS) | set(CUSTOM_OPS) | set(ops.FUSED_OPS)
    assert set(op_table.TABLE) == known


def test_rows_name_the_rules_where_they_are_defined():
    conv = op_table.TABLE["CONV_2D"]
    assert conv.validation is RULES["CONV_2D"] and conv.shape is RULES["CONV_2D"].shape
    assert conv.reference is BUILTIN_OPS["CONV_2D"] and conv.folding is None
    assert op_table.TABLE["RESHAPE"].folding is FOLDERS["RESHAPE"]
    assert "reference" in op_table.describe("CONV_2D")
