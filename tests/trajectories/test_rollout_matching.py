from trajectories.rollout_matching import MatchStep, rollouts_match


def steps(*items: tuple[str, str, str]) -> list[MatchStep]:
    """(prefix hash, role, content or 'tool:name') per step."""
    out = []
    for index, (prefix, role, content) in enumerate(items):
        if content.startswith("tool:"):
            out.append(
                MatchStep(index, prefix, role, "", tool_name=content[5:], tool_args={"x": 1})
            )
        else:
            out.append(MatchStep(index, prefix, role, content))
    return out


def test_shared_prefix_comes_from_prefix_hashes() -> None:
    left = steps(("a", "user", "q"), ("b", "assistant", "x"), ("c", "tool", "r"))
    right = steps(("a", "user", "q"), ("b", "assistant", "x"), ("d", "tool", "other"))
    result = rollouts_match(left, right)
    assert result.shared_prefix == 2
    assert result.divergence == 2
    assert [r.kind for r in result.rows] == ["shared", "shared", "changed"]


def test_same_action_later_lines_up_after_an_inserted_step() -> None:
    left = steps(("a", "user", "q"), ("l1", "assistant", "tool:search"), ("l2", "tool", "r"))
    right = steps(
        ("a", "user", "q"),
        ("r1", "assistant", "let me think"),
        ("r2", "assistant", "tool:search"),
        ("r3", "tool", "r"),
    )
    rows = [(r.left, r.right, r.kind) for r in rollouts_match(left, right).rows]
    assert rows == [
        (0, 0, "shared"),
        (None, 1, "right-only"),
        (1, 2, "same"),
        (2, 3, "same"),
    ]


def test_identical_rollouts_have_no_divergence() -> None:
    both = steps(("a", "user", "q"), ("b", "assistant", "x"))
    result = rollouts_match(both, both)
    assert result.divergence is None
    assert all(r.kind == "shared" for r in result.rows)


def test_one_rollout_stopping_early_leaves_left_only_rows() -> None:
    left = steps(("a", "user", "q"), ("b", "assistant", "x"), ("c", "assistant", "more"))
    right = steps(("a", "user", "q"), ("b", "assistant", "x"))
    result = rollouts_match(left, right)
    assert result.divergence == 2
    assert result.rows[-1].kind == "left-only"
