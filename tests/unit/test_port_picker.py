"""The launcher's ports: distinct even when the OS hands the same free port out twice."""

from __future__ import annotations

import pytest

from actorq.launch.plan import PortPicker


def test_a_port_handed_out_before_is_skipped() -> None:
    offered = iter([40001, 40002, 40001, 40002, 40003])  # the OS reuses released ports
    picker = PortPicker(lambda: next(offered))
    assert [picker.take() for _ in range(3)] == [40001, 40002, 40003]


def test_gives_up_with_a_message_instead_of_looping() -> None:
    picker = PortPicker(lambda: 40001)
    assert picker.take() == 40001
    with pytest.raises(RuntimeError, match="no free port"):
        picker.take()


def test_real_ports_are_distinct() -> None:
    picker = PortPicker()
    ports = [picker.take() for _ in range(200)]
    assert len(set(ports)) == 200
