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


def test_each_op_meaning_is_in_its_family_module():
    from gpuengine.model.families import MODULES, conv_matmul

    assert RULES["CONV_2D"] is conv_matmul.RULES["CONV_2D"]
    assert BUILTIN_OPS["CONV_2D"] is conv_matmul.BUILTIN_OPS["CONV_2D"]
    for row in op_table.TABLE.values():
        module = next(m for m in MODULES if m.__name__ == row.module)
        assert row.code in module.CODES
        for rule in (row.validation, row.folding, row.reference):
            assert rule is None or rule in (module.RULES.get(row.code), module.FOLDERS.get(row.code),
                                            module.BUILTIN_OPS.get(row.code), module.CUSTOM_OPS.get(row.code))
