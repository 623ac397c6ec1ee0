"""``--vary``: axes parsed by the field's type, crossed, named; bad axes refused in one line."""

from __future__ import annotations

import pytest

from grpolab.errors import UserError
from grpolab.sweep.variants import NO_VARIANT, Variant, parse_vary

pytestmark = pytest.mark.fast


def test_no_axis_is_one_unnamed_variant() -> None:
    assert parse_vary("") == [NO_VARIANT] and parse_vary(" ; ") == [NO_VARIANT]
    assert NO_VARIANT.name == "" and NO_VARIANT.changes == {}


def test_values_are_read_as_the_fields_type_and_axes_are_crossed() -> None:
    variants = parse_vary("max_grad_norm=0,1.5; lora=true,false")
    assert [v.name for v in variants] == ["max_grad_norm=0,lora=true", "max_grad_norm=0,lora=false",
                                          "max_grad_norm=1.5,lora=true", "max_grad_norm=1.5,lora=false"]
    assert variants[2].changes == {"max_grad_norm": 1.5, "lora": True}
    assert isinstance(variants[0].changes["max_grad_norm"], float)
    assert parse_vary("eval_limit=null,50")[0].changes == {"eval_limit": None}
    assert parse_vary("adam_betas=[0.9,0.99],[0.9,0.999]")[1].changes == {"adam_betas": (0.9, 0.999)}


def test_json_values_keep_their_commas_and_are_named_compactly() -> None:
    variants = parse_vary('task_options={"digits": [1, 2], "operators": "+,-"},{"digits":[3,3]}')
    assert [v.changes["task_options"] for v in variants] == [{"digits": [1, 2], "operators": "+,-"},
                                                            {"digits": [3, 3]}]
    assert variants[0].name == 'task_options={"digits":[1,2],"operators":"+,-"}'


def test_a_variant_id_is_a_safe_file_name_and_distinct_values_stay_distinct() -> None:
    first, second = parse_vary('task_options={"digits":[1,2]},{"digits":[1,2.0]}')
    assert first.slug != second.slug and all("/" not in v.slug and '"' not in v.slug for v in (first, second))
    assert Variant("max_grad_norm=0").slug == "max_grad_norm=0"


@pytest.mark.parametrize(("text", "needle"), [
    ("nonsense=1,2", "'nonsense' is not a training setting"),
    ("group_size=2,4", "use --group-sizes"),
    ("lr=1e-4,1e-3", "use --lrs"),
    ("threads=1,2", "changes how a run is processed"),
    ("max_grad_norm=a,b", "'a' is not a value of max_grad_norm (float)"),
    ("max_grad_norm=-1,1", "max_grad_norm must be >= 0"),
    ("lora=yes", "'yes' is not a value of lora (bool)"),
    ("task_options={nope}", "is not a value of task_options (dict)"),
    ("max_grad_norm", "must be FIELD=V1,V2"),
    ("max_grad_norm=1,1", "vary axis max_grad_norm names 1 twice"),
    ("max_grad_norm=1,1.0", "vary axis max_grad_norm names 1 twice"),
    ("max_grad_norm=0.5,5e-1", "vary axis max_grad_norm names 0.5 twice"),
    ("lora=true,True", "vary axis lora names true twice"),
    ('task_options={"digits":2},{ "digits": 2 }', 'vary axis task_options names {"digits":2} twice'),
    ("max_grad_norm=1,", "distinct, non-empty values"),
    ("max_grad_norm=0;max_grad_norm=1", "names a setting twice"),
])
def test_bad_axes_are_refused_in_one_line(text: str, needle: str) -> None:
    with pytest.raises(UserError) as error:
        parse_vary(text)
    assert needle in str(error.value) and "\n" not in str(error.value), str(error.value)
