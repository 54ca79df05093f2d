import json
import math

import pytest

from dlcp.workloads.profile import (
    Profile,
    load_profile,
    profile_from_dict,
    synthetic_profile,
)


def test_bundled_resnet50_loads_with_its_provenance():
    p = load_profile("resnet50-usbyte")
    assert p.name == "resnet50-usbyte" and len(p) == 161 and p.parameters == 25_557_032
    assert p.names[0] == "conv1.weight" and p.sizes[0] == 9408
    assert "US-Byte" in p.note and "NOT measured" in p.note  # the caveat on backward_s travels along
    assert p.backward_s[0] == pytest.approx(2 * p.forward_s[0])
    assert p.compute_s == pytest.approx(math.fsum(p.forward_s) + math.fsum(p.backward_s))
    assert p.nbytes[0] == 4 * 9408


def test_bundled_vgg16_gets_index_names():
    p = load_profile("vgg16-usbyte")
    assert len(p) == 32 and p.parameters == 138_357_544
    assert p.names[:2] == ("tensor0", "tensor1")


def test_load_by_path(tmp_path):
    f = tmp_path / "tiny.json"
    f.write_text(json.dumps({"sizes": [3, 5], "forward_s": [0.1, 0.2], "backward_s": [0.2, 0.4]}))
    p = load_profile(f)
    assert p.name == "tiny" and p.sizes == (3, 5) and p.source == str(f)


def _write(tmp_path, **over):
    data = {"model": "m", "sizes": [3, 5], "forward_s": [0.1, 0.2], "backward_s": [0.2, 0.4]}
    data.update(over)
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(data))
    return f


@pytest.mark.parametrize(
    "over, words",
    [
        ({"forward_s": [0.1]}, "forward_s: 1 entries but sizes has 2"),
        ({"backward_s": [0.2, -0.1]}, "backward_s[1]: must be a finite number of seconds >= 0"),
        ({"sizes": [3, 1.5]}, "sizes[1]: must be a positive integer"),
        ({"sizes": [0, 5]}, "sizes[0]: must be a positive integer"),
        ({"sizes": [True, 5]}, "sizes[0]"),
        ({"forward_s": [0.1, "x"]}, "forward_s[1]"),
        ({"names": ["a", "a"]}, "names: not unique"),
        ({"names": ["a"]}, "names: 1 entries"),
        ({"tensors": 3}, "tensors: says 3 but sizes give 2"),
        ({"parameters": 9}, "parameters: says 9 but sizes give 8"),
        ({"backward": [1, 2]}, "unknown key 'backward'"),
        ({"sizes": []}, "sizes: empty"),
    ],
)
def test_bad_profile_errors_name_file_and_field(tmp_path, over, words):
    f = _write(tmp_path, **over)
    with pytest.raises(ValueError) as e:
        load_profile(f)
    msg = str(e.value)
    assert str(f) in msg and words in msg and "\n" not in msg


def test_missing_field_and_bad_json(tmp_path):
    f = tmp_path / "m.json"
    f.write_text(json.dumps({"sizes": [1], "forward_s": [0.0]}))
    with pytest.raises(ValueError, match=r"m.json: missing field 'backward_s'"):
        load_profile(f)
    f.write_text("{not json")
    with pytest.raises(ValueError, match=r"m.json: not valid JSON"):
        load_profile(f)
    with pytest.raises(ValueError, match=r"cannot read"):
        load_profile(tmp_path / "absent.json")


def test_unknown_name_lists_the_bundled_ones():
    with pytest.raises(ValueError, match=r"'resnet5'.*resnet50-fp32-b64-h200, .*vgg16-usbyte"):
        load_profile("resnet5")


def test_old_names_of_the_borrowed_profiles_say_what_replaced_them():
    with pytest.raises(ValueError, match=r"'resnet50': renamed; use resnet50-usbyte .* resnet50-fp32-b64-h200"):
        load_profile("resnet50")
    with pytest.raises(ValueError, match=r"'vgg16': renamed; use vgg16-usbyte"):
        load_profile("vgg16")


def test_profile_dataclass_validates_too():
    with pytest.raises(ValueError, match=r"profile 'x': backward_s\[0\]"):
        Profile("x", ("a",), (1,), (0.0,), (math.inf,))
    with pytest.raises(ValueError, match="top level must be an object"):
        profile_from_dict([1], source="s")


def test_synthetic_profile_matches_the_synthetic_workload():
    # dlcp/synthetic.py: LeNet-5 sizes by default; compute_ms of backward spread equally over the messages
    p = synthetic_profile([156, 2416, 30840, 10164, 850], backward_ms=10.0)
    assert p.sizes == (156, 2416, 30840, 10164, 850) and p.name == "synthetic"
    assert p.backward_s == pytest.approx((0.002,) * 5) and p.forward_s == (0.0,) * 5
    assert p.compute_s == pytest.approx(0.010)
    q = synthetic_profile([10, 20], backward_ms=4.0, forward_ms=2.0, name="s2")
    assert q.forward_s == pytest.approx((0.001, 0.001)) and q.names == ("layer0", "layer1")
    with pytest.raises(ValueError, match="layers"):
        synthetic_profile([], 1.0)
    with pytest.raises(ValueError, match="backward_ms"):
        synthetic_profile([1], -1.0)
    with pytest.raises(ValueError, match=r"sizes\[1\]"):
        synthetic_profile([1, 0], 1.0)


def test_scaled_multiplies_compute_only():
    p = load_profile("vgg16-usbyte")
    q = p.scaled(2.0)
    assert q.sizes == p.sizes and q.compute_s == pytest.approx(2 * p.compute_s)
    assert "x2" in q.note
    with pytest.raises(ValueError, match="compute factor"):
        p.scaled(0)
