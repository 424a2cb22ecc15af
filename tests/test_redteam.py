"""Attacks a student who has read the grader's source would try, each in every sandbox mode.

Each attack submission (its code is in tests/attacks/) is graded in a real `qkv-grade FOLDER` run
between honest classmates: a correct submission before it and a partly wrong one (a
column-normalized softmax) after it, in one worker (`--jobs 1`) so the attack meets them. Every
test then demands that

- the grader finished (no hang, exit 0) and printed valid JSON naming the mode in force;
- every classmate got exactly the grade they get when graded alone with the same seed;
- the attack scored no more than the honest submission it is built on, and reports no hole;
- no planted secret (the instructor's 0600 file, a classmate's file, the grader's environment)
  appears in the output or the result files;
- no process of the run is left, and no file appeared outside the sandbox.

Attacks that cannot be confused with each other share one run; one whose success would wreck the
run (a signal to the grader, a frame that hangs it) has a run of its own, so a failure names it.
The modes: `bwrap` (bubblewrap as root), `bwrap-userns` (bubblewrap as a normal user, created for
the purpose: `qkvtest`), `landlock` (Landlock, seccomp and rlimits, no namespaces) as root and, as
`landlock-user`, as that normal user. A few attacks aim past the sandbox at what the grader itself
does with a submission: its file (a symlink, a notebook too deep to parse, its name), the frames
its process sends, and the text of its feedback.
"""
from __future__ import annotations

import functools
import json
import os
import re
import subprocess
import time
from pathlib import Path

import pytest

from redteam import (SECRETS, FILE_MODES, MODES, VARIANTS, Entry, Outcome, attack_source, attacker, baseline, grade, graded_view,
                     require, runtime, verdict, victim)
from support import steps_by_id


def in_worker_of(mode: str) -> pytest.MarkDecorator:
    """Under pytest-xdist, the tests of one mode run in one worker, which builds its runtime and grades
    its baselines once. Every mode run as the normal user shares one worker: a run looks for what
    that user left in /tmp, and would count another worker's run as its own leftovers. `none` goes
    with them, since the one test that needs it needs `none-user` too."""
    return pytest.mark.xdist_group("redteam-as-user" if VARIANTS[mode][1] or mode == "none" else f"redteam-{mode}")


def modes(*names: str) -> pytest.MarkDecorator:
    return pytest.mark.parametrize("mode", [pytest.param(name, marks=in_worker_of(name)) for name in names])


per_mode = modes(*MODES)
file_modes = modes(*FILE_MODES)
"""For the attacks on files: also bubblewrap on a kernel without Landlock, which the bwrap modes allow."""


def _between_classmates(*attacks: Entry) -> list[Entry]:
    """Victims around every attack: correct, attack, column-normalized, attack, correct, …"""
    entries, kinds = [victim("a", "correct")], ["colnorm", "correct"]
    for index, attack in enumerate(attacks):
        entries.append(attack)
        entries.append(victim(chr(ord("a") + len(entries)), kinds[index % 2]))
    return entries


GROUPS = {
    "frames_forged": lambda: _between_classmates(attacker("b", "frames_forged", "frames")),
    "frames_oversized": lambda: _between_classmates(attacker("b", "frames_oversized", "frames")),
    "frames_partial": lambda: _between_classmates(attacker("b", "frames_partial", "frames")),
    "frames_malformed": lambda: _between_classmates(attacker("b", "frames_malformed", "frames")),
    "frames_huge_empty": lambda: _between_classmates(attacker("b", "frames_huge_empty", "frames")),
    "frames_code": lambda: _between_classmates(attacker("b", "frames_code", "frames"),
                                               attacker("d", "frames_code_late", "frames_then_exit")),
    "frames_duplicate_keys": lambda: _between_classmates(attacker("b", "frames_duplicate_keys", "frames_late")),
    "frames_huge_float": lambda: _between_classmates(attacker("b", "frames_huge_float", "frames_late")),
    "frames_split_prefix": lambda: _between_classmates(attacker("b", "frames_split_prefix", "frames_late")),
    "surrogates": lambda: _between_classmates(attacker("b", "surrogates")),
    "frames_orphan": lambda: _between_classmates(attacker("b", "frames_orphan", "orphan")),
    "frames_form": lambda: _between_classmates(attacker("b", "frames_spaced", "frames_late"),
                                               attacker("d", "frames_reordered", "frames_late"),
                                               attacker("f", "frames_long_key", "frames_late")),
    "close_and_sleep": lambda: _between_classmates(attacker("b", "close_and_sleep")),
    "frames_unread": lambda: _between_classmates(attacker("b", "frames_unread", "calls_unread")),
    "bell": lambda: _between_classmates(attacker("b", "bell_flood", "bell", base="correct"),
                                        attacker("d", "bell_closed", "bell", base="correct")),
    "bell_slow": lambda: _between_classmates(attacker("b", "bell_slow", "bell", "bell_slow", base="slow")),
    "takeover": lambda: _between_classmates(attacker("b", "takeover")),
    "kill_parent": lambda: _between_classmates(attacker("b", "kill_parent")),
    "steal_queued": lambda: _between_classmates(attacker("b", "steal_queued")),
    "signal_everyone": lambda: _between_classmates(attacker("b", "signal_everyone")),
    "kill_minus_one": lambda: _between_classmates(attacker("b", "kill_minus_one")),
    "sigio": lambda: _between_classmates(attacker("b", "sigio_parent", "sigio"),
                                         attacker("d", "sigio_group", "sigio")),
    "deprioritize": lambda: _between_classmates(attacker("b", "deprioritize")),
    "prlimit": lambda: _between_classmates(attacker("b", "prlimit")),
    "prlimit_reach": lambda: _between_classmates(attacker("b", "prlimit_reach")),
    "daemon": lambda: _between_classmates(attacker("b", "daemon")) + [victim("z", "correct")],
    "fork_bomb": lambda: _between_classmates(attacker("b", "fork_bomb")) + [victim("z", "correct")],
    "thread_bomb": lambda: _between_classmates(attacker("b", "thread_bomb")),
    "alarm": lambda: _between_classmates(attacker("b", "alarm", base="slow")),
    "precompute": lambda: _between_classmates(attacker("b", "precompute", base="slow")),
    # A write through a raw pointer past the read-only flag returns the right values from the
    # submission's own private copy: it is held to what correct code earns, and may touch nothing else.
    "mutation": lambda: _between_classmates(attacker("b", "mutation_forged_check", base="correct"),
                                            attacker("d", "mutation_restored", base="correct")),
    "information": lambda: _between_classmates(attacker("b", "classmate"), attacker("d", "read_proc"),
                                               attacker("f", "import_solutions"), attacker("h", "network"),
                                               attacker("j", "grader_objects")),
    "deep_notebook": lambda: _between_classmates(attacker("b", "deep_notebook", suffix=".ipynb")),
    # Three tries: what survives in freed memory varies from run to run.
    "heap": lambda: _between_classmates(*(attacker(prefix, "heap_scan") for prefix in "bdf")),
    "collusion": lambda: [victim("a", "correct"), attacker("b", "collusion_writer", base="correct"),
                          attacker("c", "collusion_reader"), victim("d", "colnorm"), attacker("z", "collusion_reader")],
    "shm": lambda: [victim("a", "correct"), attacker("b", "shm_writer", "collusion_writer", base="correct"),
                    attacker("c", "shm_reader", "collusion_reader"), victim("d", "colnorm"),
                    attacker("z", "shm_reader", "collusion_reader")],
    "disk_burst": lambda: _between_classmates(attacker("b", "disk_burst")),
    "fill_shared": lambda: [victim("a", "correct"), attacker("b", "fill_shared", base="correct"), victim("c", "tempfile"),
                            victim("d", "colnorm")],
    "disk_hidden": lambda: _between_classmates(attacker("b", "hidden_folder")),
    "locked": lambda: [victim("a", "correct"),
                       attacker("b", "locked_writer", "collusion_writer", "locked_writer", base="correct"),
                       attacker("c", "locked_reader", "collusion_reader", "locked_reader"), victim("d", "colnorm")],
    "unlisted": lambda: [victim("a", "correct"),
                         attacker("b", "unlisted_writer", "collusion_writer", "unlisted_writer", base="correct"),
                         attacker("c", "unlisted_reader", "collusion_reader", "unlisted_reader"), victim("d", "correct"),
                         victim("e", "colnorm")],
    "files": lambda: _between_classmates(attacker("b", "plant_site"), attacker("d", "home_writes")),
    "metadata": lambda: _between_classmates(attacker("b", "metadata")),
    "deep_scratch": lambda: _between_classmates(attacker("b", "deep_scratch")),
    "held": lambda: _between_classmates(attacker("b", "held_memory", base="correct")),
    # Graded at once by two workers: however the two share the queue, a writer runs beside a reader.
    "channel": lambda: [attacker("a", "channel_writer", base="correct"), attacker("b", "channel_reader"),
                        attacker("c", "channel_reader"), attacker("d", "channel_writer", base="correct"),
                        victim("e", "correct"), victim("f", "colnorm")],
}
TWO_WORKERS = {"channel"}
"""Groups graded with `--jobs 2`: the attacks there need a classmate running at the same time."""


@functools.lru_cache(maxsize=None)
def attacked(mode: str, group: str) -> Outcome:
    """One run per mode and group, shared by the tests that read it."""
    require(mode)
    baseline(mode)  # graded first, so a broken mode fails here with its own message
    return grade(mode, GROUPS[group](), group, jobs=2 if group in TWO_WORKERS else 1)


def check(mode: str, group: str, *attackers: str) -> Outcome:
    outcome = attacked(mode, group)
    names = [e.name for e in outcome.entries if e.attack and (not attackers or e.kind in attackers)]
    problems = verdict(outcome, names)
    assert not problems, f"[{mode}] {group} ({outcome.seconds:.1f} s):\n  " + "\n  ".join(problems)
    return outcome


# ------------------------------------------------------------------ frames --------------------

@per_mode
def test_forged_frames_on_every_descriptor_change_no_grade(mode):
    check(mode, "frames_forged")


@per_mode
def test_a_frame_header_announcing_200_mib_and_then_nothing_hangs_nothing(mode):
    check(mode, "frames_oversized")


@per_mode
def test_a_partial_frame_on_every_descriptor_changes_no_grade(mode):
    check(mode, "frames_partial")


@per_mode
def test_malformed_frames_on_every_descriptor_crash_nothing(mode):
    check(mode, "frames_malformed")


@per_mode
def test_forged_compiled_code_runs_in_no_later_child(mode):
    """A worker keeps what a child compiled, sent before any of the submission's code runs, for the
    child that starts after a call that did not finish. Compiled code written later, at import or
    in place of a result, is refused: the fresh child after it still runs the submission's own code."""
    check(mode, "frames_code")


@per_mode
def test_a_well_formed_empty_array_numpy_cannot_shape_crashes_nothing(mode):
    """An array of shape [0, 2**62, 2**62] passes every size check (it holds no bytes), but numpy
    refuses to build it."""
    check(mode, "frames_huge_empty")


@per_mode
def test_a_result_whose_duplicate_keys_would_end_the_job_reaches_no_classmate(mode):
    check(mode, "frames_duplicate_keys")


@per_mode
def test_a_float_written_as_a_400_digit_integer_crashes_nothing(mode):
    check(mode, "frames_huge_float")


@per_mode
def test_a_result_whose_blob_completes_its_first_bytes_is_the_submissions_own_fault(mode):
    """The worker passes the expected result on by its first bytes: those of the JSON alone, as
    the header bounds it. Read past it, into the blob, the frame would reach the grader, which
    refuses it and restarts the worker, blaming the grader."""
    outcome = check(mode, "frames_split_prefix")
    attack = steps_by_id(outcome.results["b_frames_split_prefix.py"])["ex4_shapes"]
    assert "sent the grader something that is not a result" in attack["feedback"], attack["feedback"]
    assert "grading worker" not in attack["feedback"], attack["feedback"]


@per_mode
def test_lone_surrogates_in_a_submissions_text_crash_nothing(mode):
    """A lone surrogate, printed, raised or in a type's name, reaches the result files and the
    instructor's terminal as its escape: no UTF-8 writer may fail on it."""
    outcome = check(mode, "surrogates")
    result = outcome.results["b_surrogates.py"]
    text = result.get("output", "") + "".join(step["feedback"] for step in result["steps"])
    assert "\\ud800" in text and "\\ud83d" in text, text[:600]
    # a long run of them costs nothing either: the module imported and every step was graded
    assert result.get("output", "").startswith("printed at import: \\ud800\\ud800"), result.get("output", "")[:200]
    assert "grading worker failed" not in text and "could not be imported" not in text, text[:600]


# ------------------------------------------------------------------ signals -------------------

@per_mode
def test_stopping_the_worker_to_answer_its_jobs_changes_no_grade(mode):
    check(mode, "takeover")


@per_mode
def test_killing_the_parent_and_every_ancestor_changes_no_grade(mode):
    check(mode, "kill_parent")


@per_mode
def test_reading_and_replacing_the_classmate_queued_in_the_worker_changes_no_grade(mode):
    check(mode, "steal_queued")


@per_mode
def test_stopping_and_killing_every_visible_process_changes_no_grade(mode):
    check(mode, "signal_everyone")


@per_mode
def test_kill_minus_one_changes_no_grade(mode):
    check(mode, "kill_minus_one")


@per_mode
def test_a_signal_by_proxy_through_a_pipes_owner_changes_no_grade(mode):
    outcome = check(mode, "sigio")
    # The parent (the worker) must have lived on: the attack is graded exactly as the stub it is.
    got = graded_view(outcome.results["b_sigio_parent.py"], "b_sigio_parent.py")
    assert got == graded_view(baseline(mode)["stub"], "stub.py"), got


@per_mode
def test_lowering_the_workers_priority_cannot_slow_a_classmate(mode):
    check(mode, "deprioritize")


@per_mode
def test_lowering_another_processs_limits_changes_no_grade(mode):
    check(mode, "prlimit")


@per_mode
def test_no_process_outside_the_run_is_within_reach_of_prlimit(mode):
    check(mode, "prlimit_reach")


@per_mode
def test_closing_the_result_pipe_and_sleeping_hangs_nothing(mode):
    check(mode, "close_and_sleep")


@per_mode
def test_answering_calls_without_reading_them_stalls_no_worker(mode):
    """A child that forges every result at import and never reads the calls handed to it: the
    worker's hand-over of later steps must not wait on a call pipe the child keeps full."""
    check(mode, "frames_unread")


@per_mode
def test_a_flooded_or_closed_bell_costs_a_correct_submission_nothing(mode):
    """The worker reads a child's results when the child rings: a bell filled, or closed, must
    neither hang the run nor lose a correct submission any of its results."""
    outcome = check(mode, "bell")
    full = baseline(mode)["correct"]["score"]
    for entry in outcome.entries:
        if entry.attack:
            assert outcome.results[entry.name]["score"] == full, (entry.name, outcome.results[entry.name])


@per_mode
def test_ringing_the_bell_throughout_a_slow_call_gains_nothing_over_honest_slowness(mode):
    outcome = check(mode, "bell_slow")
    honest = steps_by_id(baseline(mode)["slow"])["ex4_shapes"]
    attack = steps_by_id(outcome.results["b_bell_slow.py"])["ex4_shapes"]
    assert attack["status"] == honest["status"] == "timeout", (attack, honest)


@per_mode
def test_a_result_the_grader_refuses_is_that_calls_own_fault_and_nothing_outlives_it(mode):
    """The worker passed it on by its first bytes; the grader refuses what follows (a duplicate
    key). That is the submission's fault on that call, not a failed worker: the run goes on, the
    process sleeping in its call is ended at its limit, and the classmates are untouched."""
    _own_fault_only(check(mode, "frames_orphan"), "b_frames_orphan.py")


@per_mode
def test_a_result_in_another_form_than_the_protocols_is_that_calls_own_fault(mode):
    """Spaces after the separators, or the keys in another order: the worker cannot take it by its
    first bytes, and ends the child rather than pass on what the grader could not own to its call."""
    outcome = check(mode, "frames_form")
    for name in ("b_frames_spaced.py", "d_frames_reordered.py"):
        facts = _own_fault_only(outcome, name)
        assert "not written as the protocol writes one" in facts["feedback"], facts["feedback"]
    # Refused by the grader, unread, for a field whose name is 200 000 characters (more text than a
    # result may take): a few words say so.
    facts = _own_fault_only(outcome, "f_frames_long_key.py", "an object too large to read")
    assert len(facts["feedback"]) < 2000, len(facts["feedback"])


def _own_fault_only(outcome: Outcome, name: str, said: str = "sent the grader something that is not a result") -> dict:
    """The attack's head_facts step failed on its own first call's result, and the step after it
    earned what the stub earns (not lost with a failed worker). A result passed on by its first
    bytes counts as that call's answer, so the process is handed the next call: the next step's
    example (every step's example runs before any hidden case). What the process does then (still
    asleep in head_facts, or answering head_facts's call at last) is that call's fault; the rest of
    the step runs in a fresh process, as the stub's."""
    steps = steps_by_id(outcome.results[name])
    facts, after = steps["ex4_shapes"], steps["ex5_intervention"]
    assert said in facts["feedback"], facts["feedback"]
    assert "head_facts(t=5, d_k=4, d_v=3) on the chapter's example" in facts["feedback"], facts["feedback"]
    for step in (facts, after):
        assert "grading worker" not in step["feedback"], step["feedback"]
    assert after["status"] in ("not_implemented", "timeout", "error") and after["score"] == 0.0, after
    assert "not implemented yet" in after["feedback"], after["feedback"]
    return facts


@per_mode
def test_a_daemon_does_not_survive_into_the_next_submission(mode):
    check(mode, "daemon")


@per_mode
def test_a_bounded_fork_bomb_leaves_nothing_behind_and_slows_no_classmate(mode):
    check(mode, "fork_bomb")


@per_mode
def test_a_bounded_thread_bomb_is_held_to_a_few_hundred_tasks(mode):
    check(mode, "thread_bomb")


# ------------------------------------------------------------------ its own score -------------

@per_mode
def test_ignoring_the_alarm_gains_nothing_over_honest_slowness(mode):
    outcome = check(mode, "alarm")
    honest = steps_by_id(baseline(mode)["slow"])["ex4_shapes"]
    assert honest["status"] == "timeout", f"the honest slow baseline was not timed out: {honest}"
    attack = steps_by_id(outcome.results["b_alarm.py"])["ex4_shapes"]
    assert attack["status"] == "timeout" and attack["score"] == 0.0, attack


@per_mode
def test_doing_every_calls_work_during_the_import_gains_nothing_over_honest_slowness(mode):
    outcome = check(mode, "precompute")
    attack = steps_by_id(outcome.results["b_precompute.py"])["ex4_shapes"]
    assert attack["status"] != "passed" and attack["score"] == 0.0, attack


@per_mode
def test_a_write_into_an_argument_is_caught_where_it_happens_and_a_forced_one_touches_no_one(mode):
    """An in-place numpy write fails on the read-only argument and is diagnosed. Code that forces a
    write through a raw pointer works on its own process's copy: the grader cannot see that from
    outside (README, Isolation), and the attack may gain no more than correct code, change no
    classmate and leave nothing behind."""
    check(mode, "mutation")
    honest = steps_by_id(baseline(mode)["mutating"])["softmax"]
    assert "mutates-input" in honest["diagnoses"], f"the honest mutating baseline: {honest}"
    assert honest["status"] != "passed", honest


# ------------------------------------------------------------------ what it may see -----------

@file_modes
def test_classmates_and_instructors_files_cannot_be_read(mode):
    check(mode, "information", "classmate")


@per_mode
def test_the_graders_proc_reveals_no_secret(mode):
    check(mode, "information", "read_proc")


@file_modes
def test_importing_the_reference_or_the_grader_gains_nothing(mode):
    check(mode, "information", "import_solutions")


@file_modes
def test_the_graders_own_head_is_nowhere_in_the_child(mode):
    """A child is forked from the worker: neither the worker's modules, nor the frames that run the
    submission, nor any object the collector tracks holds a working copy of the chapter's head (the
    stand-ins a step called again is given), in code, source or functions."""
    check(mode, "information", "grader_objects")


@per_mode
def test_a_classmates_source_cannot_be_found_in_memory_the_worker_left(mode):
    check(mode, "heap")


@per_mode
def test_no_connection_reaches_a_listener_on_this_machine(mode):
    check(mode, "information", "network")


# ------------------------------------------------------------------ what it may leave ----------

@file_modes
def test_answers_left_behind_do_not_score_for_a_later_stub(mode):
    check(mode, "collusion")
    # ... nor for one graded in a later run.
    later = grade(mode, [attacker("a", "collusion_reader"), victim("b", "colnorm")], "collusion-later")
    problems = verdict(later)
    assert not problems, f"[{mode}] collusion across runs:\n  " + "\n  ".join(problems)


@per_mode
def test_answers_left_in_system_v_shared_memory_do_not_score_for_a_later_stub(mode):
    check(mode, "shm")


@file_modes
def test_filling_every_shared_folder_costs_the_next_classmate_nothing(mode):
    """A submission that fills /tmp, /dev/shm and the rest outside its scratch folder: the classmate
    after it, who opens a temporary file, still gets the grade it gets alone."""
    check(mode, "fill_shared")


@file_modes
def test_answers_left_in_a_folder_locked_against_removal_do_not_score_for_a_later_stub(mode):
    check(mode, "locked")


@file_modes
def test_answers_left_in_a_folder_that_cannot_be_listed_reach_no_later_classmate(mode):
    """Folders made without read permission, or without any (`mkdir(path, 0)`), outside the scratch
    folder: swept all the same, so no later stub reads the answers and no later classmate's count of
    its folder meets one it cannot list."""
    check(mode, "unlisted")


@file_modes
def test_a_folder_made_unreadable_hides_nothing_from_the_quota(mode):
    check(mode, "disk_hidden")


@file_modes
def test_a_planted_pth_or_sitecustomize_never_lands(mode):
    check(mode, "files", "plant_site")


@file_modes
def test_the_instructors_home_cannot_be_changed(mode):
    check(mode, "files", "home_writes")


@file_modes
def test_no_file_outside_the_scratch_folder_has_its_mode_owner_times_or_attributes_changed(mode):
    check(mode, "metadata")


@per_mode
def test_folders_nested_to_the_recursion_limit_in_the_scratch_folder_are_removed_and_crash_nothing(mode):
    outcome = check(mode, "deep_scratch")
    # The folder this run's worker made, as the attack saw it (under bubblewrap, in a /tmp of the
    # sandbox's own); other grading runs on the machine make and remove scratch folders of theirs.
    output = next(result.get("output", "") for name, result in outcome.results.items() if "deep_scratch" in name)
    seen = re.search(r"note: scratch at (\S+)", output)
    assert seen, output[-800:]
    root = Path(*Path(seen.group(1)).parts[:next(i for i, part in enumerate(Path(seen.group(1)).parts)
                                                  if part.startswith("qkv-scratch-")) + 1])
    deadline = time.monotonic() + 10
    while root.exists() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not root.exists(), f"a worker's scratch folder was left behind: {root}"


@per_mode
def test_filling_the_scratch_folder_in_short_bursts_is_stopped_at_its_quota(mode):
    check(mode, "disk_burst")


def _refused(outcome: Outcome, name: str, ways: list[str]) -> None:
    """Each of `ways` was tried by attack `name` and refused, by its own account."""
    output = outcome.results[name].get("output", "")
    missing = [way for way in ways if f"refused: {way} (" not in output]
    assert not missing, f"[{outcome.mode}] {name} was not refused {missing}: {output[-800:]}"


@per_mode
def test_memory_held_in_anonymous_unnamed_or_unlinked_files_is_refused(mode):
    """Neither the address-space limit nor the listing of the scratch folder counts a file without
    a name: each way of holding one is refused before it holds anything, and the attack, a correct
    submission otherwise, keeps its full marks."""
    outcome = check(mode, "held")
    ways = ["memfd_create", "open with O_TMPFILE", "unlink while open", "rename over an open file", "memfd_secret",
            "F_SETPIPE_SZ"] + (["openat2 with O_TMPFILE"] if os.uname().machine == "x86_64" else [])
    _refused(outcome, "b_held_memory.py", ways)
    assert outcome.results["b_held_memory.py"]["score"] == baseline(mode)["correct"]["score"]


def _channel(mode: str, writer_ways: list[str], reader_ways: list[str]) -> None:
    """Both ends of the channel graded at once: the readers learn nothing (each graded exactly as the
    stub it is built on), and each writer's attempt, like each reader's probe, is refused."""
    outcome = check(mode, "channel")
    for name in ("b_channel_reader.py", "c_channel_reader.py"):
        assert graded_view(outcome.results[name], name) == graded_view(baseline(mode)["stub"], "stub.py"), name
        _refused(outcome, name, reader_ways)
    for name in ("a_channel_writer.py", "d_channel_writer.py"):
        _refused(outcome, name, writer_ways)


@per_mode
def test_two_classmates_graded_at_once_cannot_signal_through_a_lock(mode):
    _channel(mode, ["flock", "fcntl F_SETLK read lock", "fcntl F_OFD_SETLK read lock"],
             ["flock", "fcntl F_GETLK", "fcntl F_OFD_GETLK"])


@per_mode
def test_two_classmates_graded_at_once_cannot_signal_through_the_page_cache(mode):
    _channel(mode, ["posix_fadvise DONTNEED", "madvise PAGEOUT", "madvise COLD", "readahead", "madvise WILLNEED"],
             ["mincore", "cachestat", "preadv2 RWF_NOWAIT"])


@per_mode
def test_two_classmates_graded_at_once_cannot_signal_through_queued_signals(mode):
    _channel(mode, ["queued signals"], ["queued signals"])


@per_mode
def test_two_classmates_graded_at_once_cannot_read_each_others_scheduling_state(mode):
    _channel(mode, [], ["sched_getscheduler", "sched_getparam", "sched_getaffinity", "getpriority", "getpgid",
                        "getsid"])


# ------------------------------------------------------------------ the grader's own reads -----

@per_mode
def test_a_notebook_nested_too_deep_for_json_crashes_nothing(mode):
    outcome = check(mode, "deep_notebook")
    result = outcome.results["b_deep_notebook.ipynb"]
    assert {s["status"] for s in result["steps"]} == {"error"}, result["steps"][0]



@per_mode
def test_symlinked_submissions_are_unreadable_and_leak_nothing(mode):
    require(mode)
    rt = runtime(mode)
    secret = rt.base / "links" / "root-only-token.py"
    secret.parent.mkdir(exist_ok=True)
    token = SECRETS["instructor"]  # a module whose every failure would quote the token
    secret.write_text(f"x = {token!r}\nprint(x)\nraise ValueError(x)\nnot_defined_{token}\n")
    secret.chmod(0o600)
    # A student's folder that is a link (nbgrader's layout: submitted/<student>/ps1/attention_head.py).
    linked_folder = rt.base / "links" / "elsewhere" / "ps1"
    linked_folder.mkdir(parents=True, exist_ok=True)
    (linked_folder / "attention_head.py").write_text(secret.read_text())
    (linked_folder / "attention_head.py").chmod(0o600)
    if rt.as_user:
        for path in (secret, linked_folder / "attention_head.py"):
            os.chown(path, rt.uid, rt.gid)
    reference = rt.repo / "solutions" / "attention_head.py"
    outcome = grade(mode, [victim("a", "correct"), victim("c", "colnorm")], "symlinks",
                    links={"b_link_secret.py": secret, "d_link_reference.py": reference,
                           "eve": linked_folder.parent})
    problems = outcome.problems()
    graded = sorted(outcome.results or {})
    if any(name.startswith("eve") for name in graded):
        problems.append(f"a submission was read through a linked folder: {graded}")
    # directly in the folder graded, a link named as a submission is no one's work: listed, not graded
    for name in ("b_link_secret.py", "d_link_reference.py"):
        if name in (outcome.results or {}):
            problems.append(f"{name} was graded as a student: {outcome.results[name]['score']}")
        if f"qkv-grade: not graded: {name}: a symbolic link: not followed" not in outcome.stderr:
            problems.append(f"{name} is not listed as a link not followed: {outcome.stderr[-600:]!r}")
    assert not problems, f"[{mode}] symlinks:\n  " + "\n  ".join(problems)


@per_mode
def test_a_file_named_like_a_classmates_folder_does_not_replace_their_result_file(mode):
    """alice/attention_head.py and a file called alice__attention_head.py, side by side."""
    require(mode)
    entries = [Entry("alice/attention_head.py", "correct"), Entry("alice__attention_head.py", "stub")]
    outcome = grade(mode, entries, "names")
    problems = outcome.problems()
    written = {}
    for name, text in outcome.files.items():
        if name.endswith((".py.json", ".ipynb.json")):  # not the run's own run.json
            document = json.loads(text)
            written[document["submission"]] = document["score"]
    if written != {"alice/attention_head.py": 100.0, "alice__attention_head.py": 0.0}:
        problems.append(f"result files hold {written}")
    assert not problems, f"[{mode}] " + "; ".join(problems)


@per_mode
def test_a_file_name_that_is_not_utf8_crashes_nothing(mode):
    """A name of undecodable bytes (a zip from another system) comes back from the file system as a
    str holding lone surrogates, which no UTF-8 writer accepts: it is listed, escaped, not graded."""
    require(mode)
    odd = "b_\udcff.py"  # the byte 0xff, as os.listdir returns it
    outcome = grade(mode, [victim("a", "correct"), Entry(odd, "stub"), victim("c", "colnorm")], "undecodable")
    problems = [p for p in verdict(outcome) if not p.startswith(f"no result for [{odd!r}]")]
    summary = outcome.files.get("summary.csv", "")
    if "b_\\xff.py" not in summary:
        problems.append(f"summary.csv does not list the file: {summary[-300:]!r}")
    assert not problems, f"[{mode}] " + "; ".join(problems)


@per_mode
def test_a_file_name_cannot_become_a_spreadsheet_formula_in_the_summary(mode):
    """A cell that opens with = + - or @ is a formula to Excel and LibreOffice (CSV injection)."""
    require(mode)
    outcome = grade(mode, [Entry('=HYPERLINK("x";"y").py', "stub"), Entry("@SUM(1+1).py", "stub")], "formula")
    problems = outcome.problems()
    cells = [row.split(",", 1)[0] for row in outcome.files.get("summary.csv", "").splitlines()[1:]]
    problems += [f"summary.csv cell {cell!r}" for cell in cells if cell.lstrip('"').startswith(("=", "+", "-", "@"))]
    assert not problems, f"[{mode}] " + "; ".join(problems)


# ------------------------------------------------------------------ the suite itself ----------

@in_worker_of("none-user")
def test_the_harmless_attacks_succeed_without_a_sandbox():
    """The attacks have teeth: with --no-sandbox's mode, those that only read, connect and leave
    files get what they are after, and those aimed only at this run's own processes (a renice, a
    bounded thread bomb) take effect; never those that fork, fill a disk or kill a worker (a dead
    worker leaves its scratch folder in /tmp). An attack broken by a typo would otherwise pass
    everywhere, unnoticed."""
    require("none")
    information, collusion = attacked("none", "information"), attacked("none", "collusion")
    stub = baseline("none")["stub"]["score"]
    evidence = {
        "classmate": information.holes("b_classmate.py"),
        # as a normal user too, the grader's own files are the submission's to read
        "classmate reads the grading key": any("grading key" in hole for hole in attacked(
            "none-user", "information").holes("b_classmate.py")),
        "import_solutions": information.results["f_import_solutions.py"]["score"] > stub,
        "grader_objects": information.results["j_grader_objects.py"]["score"] > stub,
        "network": information.network,
        "collusion_reader": collusion.results["c_collusion_reader.py"]["score"] > stub,
        "deprioritize": attacked("none", "deprioritize").holes("b_deprioritize.py"),
        "thread_bomb": attacked("none", "thread_bomb").holes("b_thread_bomb.py"),
        "held_memory": attacked("none", "held").holes("b_held_memory.py"),
        "channel_reader": attacked("none", "channel").holes("b_channel_reader.py")
        + attacked("none", "channel").holes("c_channel_reader.py"),
        # run as a normal user, the grader is a process of the submission's own user
        "steal_queued": any("replaced the job" in hole for hole in attacked("none-user", "steal_queued").holes(
            "b_steal_queued.py")),
    }
    assert all(evidence.values()), [attack for attack, seen in evidence.items() if not seen]


# ------------------------------------------------------------------ modes themselves ----------

@per_mode
def test_control_characters_from_a_submission_never_reach_the_instructors_terminal(mode):
    require(mode)
    rt = runtime(mode)
    folder = rt.base / "escapes"
    folder.mkdir(exist_ok=True)
    target = folder / "attention_head.py"
    target.write_text(attack_source(("escapes",), "correct", {"run": "", "marker": "qkvrt-escapes", "attack": "escapes"}))
    for fmt in ("text", "json"):
        done = subprocess.run(rt.argv(str(target), "--format", fmt, "--seed", "1", "--timeout", "0.5"),
                              env=rt.env(rt.base), cwd=rt.base, capture_output=True, text=True, timeout=120)
        assert done.returncode == 0, done.stderr[-500:]
        controls = sorted({repr(c) for c in done.stdout + done.stderr if ord(c) < 32 and c not in "\n\t"})
        assert not controls, f"[{mode}] --format {fmt} printed control characters {controls}"


@modes(*MODES, "none")
def test_a_correct_submission_importing_the_standard_library_gets_full_marks(mode):
    require(mode)
    outcome = grade(mode, [Entry("attention_head.py", "stdlib")], "stdlib", single=True)
    problems = outcome.problems()
    assert not problems, f"[{mode}] " + "; ".join(problems)
    result = outcome.results["attention_head.py"]
    assert result["score"] == result["max_score"] == 100.0, [
        (s["id"], s["status"], s["feedback"][:200]) for s in result["steps"] if s["status"] != "passed"]


@pytest.mark.parametrize("mode", ["bwrap"])
@in_worker_of("landlock-user")  # what it runs as
def test_a_forced_mode_that_is_unavailable_exits_2_with_one_line(mode):
    """bubblewrap as root, asked for by a normal user: refused, not downgraded."""
    require("landlock-user")
    rt = runtime("landlock-user")
    target = rt.base / "unavailable.py"
    target.write_text("import numpy as np\n")
    env = {**rt.env(rt.base), "QKV_SANDBOX": mode}
    done = subprocess.run(rt.argv(str(target), "--format", "json", "--seed", "1"), env=env, cwd=rt.base,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2, (done.returncode, done.stdout[:300], done.stderr[-300:])
    assert done.stdout == "" and len(done.stderr.strip().splitlines()) == 1, done.stderr
