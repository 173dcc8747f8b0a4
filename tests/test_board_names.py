"""Boards by name: every board's label and title tell it apart from its neighbours, by the fields that differ and
then by the protocol or dataset parameters, so two boards never read alike and a hash is the last resort."""

from __future__ import annotations

import json

from harness.leaderboard.statistics.analysis import board_codes, board_names


def _board(key: str, protocol_params: dict, dataset: str = "homography_photos", **fields: str) -> dict:
    return {"comparability_key": key, "task": "correspondence", "dataset_name": dataset, "split": "test",
            "protocol": "homography-nn-correspondence/v1", "protocol_params": json.dumps(protocol_params),
            "dataset_params": json.dumps({"pairs": 8}), "pooling_requested": "default", "feature_mode": "dense",
            "precision": "fp32", **fields}


def test_boards_alike_but_for_parameters_are_titled_by_them():
    boards = [_board("2653aaaa", {"thresholds_px": [0.5, 1.0, 2.0], "units": "patch", "margin": 0.1}),
              _board("ccafbbbb", {"thresholds_px": [8.0, 16.0, 32.0], "margin": 0.1}),
              _board("fb78cccc", {"thresholds_px": [8.0, 16.0, 32.0], "margin": 0.1}, dataset="homography_sweep")]
    names = board_names(boards)
    labels, titles = [names[b["comparability_key"]][0] for b in boards], [names[b["comparability_key"]][1]
                                                                          for b in boards]
    assert len(set(labels)) == len(set(titles)) == 3
    assert "thresholds_px=[0.5, 1.0, 2.0]" in titles[0] and "units=patch" in titles[0]
    assert "thresholds_px=[8.0, 16.0, 32.0]" in titles[1] and "units" not in titles[1]
    assert "margin" not in titles[0] + titles[1]  # the same on both: it tells nothing apart
    # a label, drawn on charts and as a column head, names only what tells the two apart: the parameter both have
    assert labels[0] == "correspondence (homography_photos, thresholds_px=[0.5, 1.0, 2.0])"
    assert labels[1] == "correspondence (homography_photos, thresholds_px=[8.0, 16.0, 32.0])"
    assert not any(b["comparability_key"] in label + title for b in boards for label, title in names.values())
    # a board of another dataset is alike to neither, so it carries no parameters
    assert titles[2] == "correspondence on homography_sweep (test), homography-nn-correspondence/v1"


def test_the_key_is_the_last_resort_and_codes_stay_short():
    boards = [_board("2653aaaa", {"margin": 0.1}), _board("2653bbbb", {"margin": 0.1})]
    names = board_names(boards)
    assert names["2653aaaa"][1] != names["2653bbbb"][1] and names["2653aaaa"][1].endswith("2653aaaa")
    assert board_codes(["2653aaaa", "2653bbbb"]) == {"2653aaaa": "B-2653a", "2653bbbb": "B-2653b"}
