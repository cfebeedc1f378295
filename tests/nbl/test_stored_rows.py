"""The rows a job stores for its outputs' layers: the criterion only where a measured selection chose the k, the
family and the saved dtype only where known, and the result reads each back (nbl/result.job_result)."""

from nbl.result import job_result
from nbl.selection.stored_rows import selection_rows


def test_rows_carry_what_is_known_and_the_result_reads_it_back():
    rows = selection_rows(
        "attn", {2: [5, 6], 4: [3, 4, 5, 6]}, {"chosen": [{"k": 4, "criterion": "greedy"}]}, "llama", {2: "bfloat16"}
    )
    assert rows == [
        {"k": 2, "mode": "attn", "layers": [5, 6], "family": "llama", "dtype": "bfloat16"},
        {"k": 4, "mode": "attn", "layers": [3, 4, 5, 6], "criterion": "greedy", "family": "llama"},
    ]
    outputs = job_result({"compression": {"k": [2, 4], "criterion": "cca"}}, rows, {})["outputs"]
    assert [(o["criterion"], o["dtype"]) for o in outputs] == [("cca", "bfloat16"), ("greedy", None)]


def test_no_family_no_dtype_no_measured():
    assert selection_rows("block", {1: [7]}) == [{"k": 1, "mode": "block", "layers": [7]}]
