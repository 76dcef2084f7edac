"""Calibrated cost models (issue 31): cards, the store, `--cost-model auto`, `shardopt calibrate --backend cpu`.

The calibration tests time real kernels (fbgemm's CPU TBE) on a few tiny samples; they check what the pipeline makes
(a card, a model `auto` then picks, a resumed collection without duplicates), never how fast anything is.
"""

from __future__ import annotations

import gzip
import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest
from typer.testing import CliRunner

from costmodels.auto import choose_auto, choose_cost_model, use_warnings
from costmodels.cards import CardError, Domain, ModelCard, load_card
from costmodels.store import SHIPPED_DIR, card_beside, shipped_cards, user_cards
from shardopt.cli import app
from shardopt.core.fingerprint import Fingerprint, cpu_fingerprint, fingerprint_from_dict, gpu_profile_name
from shardopt.core.ir import load_instance

ROOT = Path(__file__).resolve().parents[1]
CPU_TEST = ROOT / "instances" / "suites" / "cpu-test"
CPU_INSTANCE = CPU_TEST / "cpu-test-s1-0001.json"  # batch 8,192, 25 tables on 5 devices, pooling <= 52
DREAMSHARD = ROOT / "instances" / "suites" / "dreamshard-test" / "dreamshard-test-s1-0000.json"
OTHER_CPU = Fingerprint(kind="cpu", name="Some CPU", vendor="GenuineIntel", family="6", model="143", cores=2)


def run(*args: str, env: dict[str, str] | None = None):
    return CliRunner().invoke(app, [str(a) for a in args], env=env)


def _store_model(store: Path, model_id: str, fingerprint: Fingerprint, domain: Domain | None = None, hardware: str = "cpu") -> ModelCard:
    """A store folder holding the shipped zen5 model's files under a card of `fingerprint` (what `calibrate` writes)."""
    shipped = load_card(SHIPPED_DIR / "neural-cpu-zen5.card.json", source="shipped")
    folder = store / model_id
    folder.mkdir(parents=True)
    shutil.copy2(shipped.model_path("neural"), folder / "neural.npz")
    shutil.copy2(shipped.model_path("analytic"), folder / "profile.json")
    card = replace(shipped, id=model_id, fingerprint=fingerprint, hardware=hardware, domain=domain or shipped.domain,
                   models={"neural": "neural.npz", "analytic": "profile.json"}, source="user", path=None, date="2026-11-27")
    card.save(folder / "card.json")
    return load_card(folder / "card.json")


# ---- fingerprints and cards -------------------------------------------------------------------------------------


def test_cpu_fingerprint_names_this_machine_and_matches_itself_only():
    fp = cpu_fingerprint()
    assert fp.kind == "cpu" and fp.name and fp.cores and fp.cores >= 1
    if fp.family is not None:
        assert fp.matches(fp) and not fp.matches(OTHER_CPU)
    unknown = Fingerprint(kind="cpu", name=fp.name, vendor=fp.vendor, cores=fp.cores)
    assert not unknown.matches(unknown)  # family / model unknown: it matches no machine, not even a like one
    assert fingerprint_from_dict(fp.to_dict()) == fp
    assert gpu_profile_name("NVIDIA H200") == "h200" and gpu_profile_name("NVIDIA GH200 480GB") == "gh200"
    assert gpu_profile_name("NVIDIA L4") is None


def test_shipped_cards_load_with_their_models_and_domains():
    cards = {c.id: c for c in shipped_cards()}
    assert {"neural-cpu", "neural-cpu-zen5", "neural-h200-torch"} <= set(cards)
    zen5 = cards["neural-cpu-zen5"]
    assert zen5.hardware == "cpu" and zen5.backend == "cpu" and not zen5.is_kernel_fallback
    assert zen5.domain.batch_size == (1024, 8192) and zen5.samples["train"] == 4000
    assert zen5.model_path().is_file() and zen5.model_path("analytic").is_file()
    assert cards["neural-h200-torch"].is_kernel_fallback and cards["neural-h200-torch"].hardware == "h200"
    assert 0 < zen5.device_accuracy()["mape"] < 0.2
    # the card of a file: a shipped weights file and a shipped profile both lead to their card
    assert card_beside(zen5.model_path()).id == "neural-cpu-zen5"
    assert card_beside(zen5.model_path("analytic")).id == "neural-cpu-zen5"


def test_the_shipped_h200_calibration_is_what_auto_plans_an_h200_instance_with():
    """The GPU campaign's calibration (benchmarks/ship_model_cards.py) ships its refitted profile as the model auto
    uses for an H200 instance within its domain, priced on any machine (a GPU card matches by hardware profile)."""
    cal = next(c for c in shipped_cards() if c.id == "calibrated-h200-torch")
    assert cal.hardware == "h200" and cal.backend == "cuda" and cal.is_kernel_fallback and cal.preferred == "analytic"
    assert cal.model_path().is_file() and cal.model_path("neural").is_file()
    assert card_beside(cal.model_path("analytic")).id == "calibrated-h200-torch"
    inst = load_instance(ROOT / "benchmarks/results/gpu-h200-2026-11-26/lease4/campaign/dreamshard-h200/dreamshard-test-s1-0000.json")
    assert inst.topology.hardware == "h200" and not cal.domain.outside(inst)
    choice = choose_cost_model("auto", inst)
    assert choice.card_id == "calibrated-h200-torch" and choice.notice is None
    from costmodels.registry import get_cost_model
    from solvers.catalog import get_solver

    plan = get_solver("greedy").solve(inst, choice.model, seed=0).plan
    calibrated = float(choice.model.plan_costs(inst, plan).total.max())
    data_sheet = float(get_cost_model("analytic").plan_costs(inst, plan).total.max())
    assert calibrated > 5 * data_sheet  # the data sheet's H200 is far faster than the measured torch fallback


def test_the_shipped_cpu_calibration_plans_its_own_cpu_only(tmp_path: Path) -> None:
    """The 2-core EPYC family 25 model 17 calibration (benchmarks/ship_model_cards.py, docs/measured.md "The machine's
    level") ships its neural model as what auto plans a `cpu` instance with on that CPU kind, and on no other: another
    CPU falls back to the analytic model with the notice. The machine is passed, so the test does not depend on the
    CPU it runs on."""
    cal = next(c for c in shipped_cards() if c.id == "calibrated-cpu-epyc-f25m17")
    assert cal.hardware == "cpu" and cal.backend == "cpu" and not cal.is_kernel_fallback and cal.preferred == "neural"
    assert (cal.fingerprint.family, cal.fingerprint.model, cal.fingerprint.cores) == ("25", "17", 2)
    assert cal.model_path().is_file() and cal.model_path("analytic").is_file()
    assert card_beside(cal.model_path()).id == "calibrated-cpu-epyc-f25m17"
    # its level at the end of its calibration, and the anchors `costmodel level` re-times on a copy in the store
    assert 0.5 < cal.level_factor < 2 and cal.anchors_path().is_file() and cal.anchors_path().parent == SHIPPED_DIR
    inst = load_instance(ROOT / "instances/suites/cpu-test/cpu-test-s1-0003.json")
    assert inst.topology.hardware == "cpu" and not cal.domain.outside(inst)
    empty = tmp_path / "store"  # (no user models: the shipped ones only)
    here = choose_cost_model("auto", inst, models_dir=empty, machine=cal.fingerprint)
    assert here.card_id == "calibrated-cpu-epyc-f25m17" and here.notice is None and not here.warnings
    from solvers.catalog import get_solver

    plan = get_solver("greedy").solve(inst, here.model, seed=0).plan
    predicted = float(here.model.plan_costs(inst, plan).total.max())
    assert 0 < predicted < 1e4  # (the loaded weights price a plan: milliseconds of this CPU)
    other = replace(cal.fingerprint, family="99", model="1")  # (a CPU no shipped model was measured on)
    elsewhere = choose_cost_model("auto", inst, models_dir=empty, machine=other)
    assert elsewhere.card_id is None and elsewhere.name.startswith("analytic") and "calibrate" in (elsewhere.notice or "")
    named = choose_cost_model("calibrated-cpu-epyc-f25m17", inst, models_dir=empty, machine=other)
    assert any("another CPU" in w for w in named.warnings)


@pytest.mark.parametrize("field, value, expect", [
    ("backend", "sim", "backend: 'sim' is not cpu or cuda"),
    ("hardware", "tpu9", "hardware: 'tpu9' is not a known hardware profile"),
    ("domain", {"batch_size": [1, 2]}, "domain.rows"),
    ("fingerprint", {"kind": "fpga", "name": "x"}, "fingerprint.kind"),
    ("models", {"neural": "missing.npz"}, "models.neural: 'missing.npz': no such file"),
])
def test_a_malformed_card_is_refused_naming_the_field(tmp_path: Path, field: str, value: object, expect: str):
    doc = json.loads((SHIPPED_DIR / "neural-cpu-zen5.card.json").read_text())
    doc["models"] = {"neural": str(SHIPPED_DIR / "neural-cpu-zen5.npz")}
    doc[field] = value
    path = tmp_path / "card.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(CardError, match=str(path)) as err:
        load_card(path)
    assert expect in str(err.value)


def test_domain_says_why_an_instance_is_outside():
    inst = load_instance(CPU_INSTANCE)
    dom = Domain(batch_size=(1024, 4096), rows=(100, 50_000), dim=(4, 256), pooling_factor=(0.2, 40.0), tables_per_device=(1, 3))
    reasons = dom.outside(inst)
    assert any("batch 8,192 outside the trained 1,024-4,096" in r for r in reasons)
    assert any("pooling factors outside" in r for r in reasons)
    assert any("5 tables per device" in r for r in reasons)
    wide = Domain(batch_size=(1024, 8192), rows=(100, 50_000), dim=(4, 256), pooling_factor=(0.2, 60.0), tables_per_device=(1, 10))
    assert wide.outside(inst) == []


# ---- auto ----------------------------------------------------------------------------------------------------------


def test_auto_picks_the_model_calibrated_on_this_machine_for_a_cpu_instance(tmp_path: Path):
    card = _store_model(tmp_path, "mine", cpu_fingerprint())
    r = run("solve", CPU_INSTANCE, "--solver", "greedy", "--models", tmp_path, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["cost_model_card"] == "mine" and doc["cost_model_choice"]["asked"] == "auto"
    assert doc["cost_model_choice"]["name"] == str(card.model_path("neural"))
    # the human form names the card and its machine
    r = run("solve", CPU_INSTANCE, "--solver", "greedy", "--models", tmp_path)
    assert "predicted by auto: mine (calibrated on" in r.stdout


def test_auto_falls_back_to_analytic_with_a_notice(tmp_path: Path):
    _store_model(tmp_path, "mine", cpu_fingerprint())
    # hardware no model is for
    r = run("solve", DREAMSHARD, "--solver", "greedy", "--models", tmp_path, "--json")
    assert r.exit_code == 0
    doc = json.loads(r.stdout)
    assert doc["cost_model_card"] is None and doc["cost_model"] == "analytic (v100 profile)"
    assert "no calibrated model for hardware 'v100'" in r.stderr and "shardopt calibrate --backend cuda" in r.stderr
    # a model for this hardware measured on another CPU is not used
    inst = load_instance(CPU_INSTANCE)
    other = _store_model(tmp_path / "o", "theirs", OTHER_CPU)
    card, notice = choose_auto(inst, [other], machine=cpu_fingerprint())
    assert card is None and "measured on another CPU" in notice and "shardopt calibrate --backend cpu" in notice


def test_auto_falls_back_outside_the_domain_and_names_the_reason(tmp_path: Path):
    narrow = Domain(batch_size=(1024, 4096), rows=(100, 50_000), dim=(4, 256), pooling_factor=(0.1, 500.0), tables_per_device=(1, 10))
    card = _store_model(tmp_path, "narrow", cpu_fingerprint(), domain=narrow)
    # (the store's card alone: a shipped card may cover the instance on a machine like the one it was measured on)
    chosen, notice = choose_auto(load_instance(CPU_INSTANCE), [card], machine=cpu_fingerprint())
    assert chosen is None
    assert "narrow does not cover this instance: batch 8,192 outside the trained 1,024-4,096" in notice


def test_a_named_model_of_other_hardware_or_domain_warns(tmp_path: Path):
    inst = load_instance(CPU_INSTANCE)
    theirs = _store_model(tmp_path, "theirs", OTHER_CPU, domain=Domain((1024, 4096), (100, 50_000), (4, 256), (0.1, 500.0), (1, 10)))
    warnings = use_warnings(theirs, inst, machine=cpu_fingerprint())
    assert any("measured on another CPU" in w and "Some CPU family 6 model 143" in w for w in warnings)
    assert any("outside theirs's training domain" in w and "batch 8,192" in w for w in warnings)
    r = run("solve", CPU_INSTANCE, "--solver", "greedy", "--models", tmp_path, "-c", "theirs")
    assert r.exit_code == 0 and "warning: theirs was measured on another CPU" in r.stderr
    # a GPU model on an instance naming other hardware
    h200 = next(c for c in shipped_cards() if c.id == "neural-h200-torch")
    assert any("the instance names 'cpu'" in w for w in use_warnings(h200, inst))


def test_a_corrupt_card_in_the_store_exits_2_naming_the_file(tmp_path: Path):
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "card.json").write_text("{not json")
    for args in (("costmodel", "list"), ("solve", CPU_INSTANCE, "--solver", "greedy")):
        r = run(*args, "--models", tmp_path)
        assert r.exit_code == 2, r.output
        assert str(tmp_path / "broken" / "card.json") in r.stderr and "not valid JSON" in r.stderr
    with pytest.raises(CardError):
        user_cards(tmp_path)
    # a card whose model file is missing
    (tmp_path / "broken" / "card.json").unlink()
    card = _store_model(tmp_path, "lost", cpu_fingerprint())
    card.model_path("neural").unlink()
    r = run("costmodel", "list", "--models", tmp_path)
    assert r.exit_code == 2 and "models.neural: 'neural.npz': no such file beside the card" in r.stderr
    assert str(tmp_path / "lost" / "card.json") in r.stderr


def test_costmodel_list_shows_shipped_and_store_models(tmp_path: Path):
    _store_model(tmp_path, "mine", cpu_fingerprint())
    r = run("costmodel", "list", "--models", tmp_path, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    ids = {m["id"]: m for m in doc["models"]}
    assert {"mine", "neural-cpu-zen5", "neural-h200-torch"} <= set(ids)
    assert ids["mine"]["source"] == "user" and ids["mine"]["this_machine"] is True
    assert ids["neural-cpu"]["this_machine"] is False
    r = run("costmodel", "list", "--models", tmp_path)
    assert "mine" in r.stdout and "this machine" in r.stdout


def test_neuroshard_with_a_neural_model_proposes_no_replica():
    """It used to exit 2 ('cannot cost a data-parallel replica') on the plans its own polish proposed."""
    r = run("solve", CPU_INSTANCE, "-c", "neural-cpu-zen5", "-O", "data_parallel=true", "--time-limit", "2", "--json")
    assert r.exit_code == 0, r.output
    shards = json.loads(r.stdout)["plan"]["shards"]
    assert shards and not any(s.get("replicated") for s in shards)


# ---- calibrate ------------------------------------------------------------------------------------------------------


def test_calibrate_refuses_bad_requests_naming_the_option(tmp_path: Path):
    assert "--backend cpu|cuda" in run("calibrate").stderr
    r = run("calibrate", "--backend", "sim", "--models", tmp_path)
    assert r.exit_code == 2 and "--backend: 'sim' is not cpu or cuda" in r.stderr
    r = run("calibrate", "--backend", "cpu", "--for", DREAMSHARD, "--models", tmp_path)
    assert r.exit_code == 2 and "name hardware 'v100'" in r.stderr
    r = run("calibrate", "--backend", "cpu", "--budget-minutes", "0", "--models", tmp_path)
    assert r.exit_code == 2 and "--budget-minutes" in r.stderr
    r = run("calibrate", "--backend", "cpu", "--for", tmp_path / "nothing", "--models", tmp_path)
    assert r.exit_code == 2 and "nothing: no such file" in r.stderr
    _store_model(tmp_path, "taken", cpu_fingerprint())  # an id in use is refused before anything is timed
    r = run("calibrate", "--backend", "cpu", "--id", "taken", "--models", tmp_path)
    assert r.exit_code == 2 and "--id: a model 'taken' exists already" in r.stderr
    r = run("calibrate", "--backend", "cpu", "--id", "neural-cpu-zen5", "--models", tmp_path)
    assert r.exit_code == 2 and "--id: a model 'neural-cpu-zen5' exists already" in r.stderr
    r = run("calibrate", "--backend", "cpu", "--rounds", "2", "--models", tmp_path)
    assert r.exit_code == 2 and "--rounds: the loop solves the instances you will solve" in r.stderr
    r = run("calibrate", "--backend", "cpu", "--with-policies", "--models", tmp_path)
    assert r.exit_code == 2 and "--with-policies: the policies learn to place the instances you will solve" in r.stderr
    try:
        import torch

        has_gpu = torch.cuda.is_available()
    except ImportError:
        has_gpu = False
    if not has_gpu:
        r = run("calibrate", "--backend", "cuda", "--models", tmp_path)
        assert r.exit_code == 2 and r.stderr.startswith("error: --backend cuda:")


TINY = ("--samples", "30", "--test-samples", "4", "--epochs", "3", "--repeats", "1")


@pytest.mark.integration
def test_calibrate_end_to_end_makes_a_card_that_auto_then_picks(tmp_path: Path):
    store = tmp_path / "store"
    r = run("calibrate", "--backend", "cpu", "--budget-minutes", "5", "--for", CPU_INSTANCE, "--rounds", "0", "--models", store, *TINY, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    card = load_card(Path(doc["path"]))
    assert card.backend == "cpu" and card.hardware == "cpu" and card.fingerprint.matches(cpu_fingerprint())
    assert card.samples["train"] == 30 and card.samples["test"] == 4
    assert 1024 <= card.domain.batch_size[0] <= 8192 <= card.domain.batch_size[1] <= 16384  # the defaults and the instance's batch
    assert "neural" in card.accuracy and "analytic" in card.accuracy and card.command.startswith("shardopt ")
    assert card.libraries.get("fbgemm-gpu-cpu") and "fbgemm" in card.kernel
    assert {"neural (this calibration)", "analytic refitted (this calibration)", "analytic (cpu data sheet)"} <= set(doc["heldout"])
    # the machine's level, read on held-out anchors at the end, is on the card and scales the model auto gets
    assert card.level["factor"] > 0 and 1 <= card.level["anchors"] <= 4 and card.level["repeats"] == 1
    assert any(s["name"] == "level" for s in doc["stages"])
    assert card.anchors_path().name == "anchors.jsonl.gz" and card.anchors_path().is_file()  # what `costmodel level` re-times
    for kind in card.models:
        assert card.model_path(kind).is_file()
    with gzip.open(card.path.parent / "data" / "train.jsonl.gz", "rt") as f:
        assert len([line for line in f if line.strip()]) == 30
    # auto now plans the instance with it (the card covers it: it was calibrated for it)
    choice = choose_cost_model("auto", load_instance(CPU_INSTANCE), store)
    assert choice.card_id == card.id and choice.notice is None
    from costmodels.registry import get_cost_model

    assert get_cost_model(f"{card.id}/neural", store).compute_scale == pytest.approx(card.level["factor"])
    # and the store lists it
    listed = json.loads(run("costmodel", "list", "--models", store, "--json").stdout)["models"]
    assert any(m["id"] == card.id and m["source"] == "user" for m in listed)


@pytest.mark.integration
def test_an_interrupted_calibration_resumes_without_duplicates(tmp_path: Path):
    from shardopt.measure.calibration import calibrate_machine, domain_settings

    store = tmp_path / "store"
    settings = domain_settings("cpu", "cpu", [load_instance(CPU_INSTANCE)], train_samples=10, test_samples=4, epochs=2, repeats=1)

    class Killed(Exception):
        pass

    def kill_after_four(stage: str, done: int, total: int) -> None:
        if stage == "collect-train" and done >= 4:
            raise Killed  # as if the process died after the 4th sample was written

    with pytest.raises(Killed):
        calibrate_machine(settings, cpu_fingerprint(), budget_s=300, models_dir=store, progress=kill_after_four)
    work = next((store / ".work").iterdir())
    assert len((work / "train.jsonl").read_text().splitlines()) == 4
    seen: list[int] = []
    result = calibrate_machine(settings, cpu_fingerprint(), budget_s=300, models_dir=store,
                               progress=lambda s, d, t: seen.append(d) if s == "collect-train" else None)
    assert result.resumed and seen[0] == 5  # the 5th sample was the first one timed again
    with gzip.open(result.card.path.parent / "data" / "train.jsonl.gz", "rt") as f:
        ids = [json.loads(line)["id"] for line in f if line.strip()]
    assert sorted(ids) == list(range(10))  # every sample once
    assert not work.exists()  # the work folder goes once the model is registered


@pytest.mark.slow  # (make test-all; 22-63 s: a calibration with its loop; the GPU campaign's dry run runs one loop round in make test)
def test_the_loop_adds_samples_from_proposed_plans_and_reports_the_plan_level_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import shardopt.measure.calibration as calibration
    from shardopt.cli.calibrate import _proposer
    from shardopt.measure.calibration import calibrate_machine, domain_settings

    targets = [load_instance(CPU_TEST / f"cpu-test-s1-00{i}.json") for i in ("08", "09", "10")]
    epochs = calibration.MIN_EPOCHS + 2
    settings = domain_settings("cpu", "cpu", targets, train_samples=12, test_samples=4, epochs=epochs, repeats=1)
    close_loop = calibration._Calibration.close_loop

    def starved_loop(self, *args, **kwargs):  # the rounds' proposals use all their time: no epoch fits in what is left
        monkeypatch.setattr(calibration, "TRAIN_S_PER_SAMPLE_EPOCH", 1e3)
        return close_loop(self, *args, **kwargs)

    monkeypatch.setattr(calibration._Calibration, "close_loop", starved_loop)
    result = calibrate_machine(settings, cpu_fingerprint(), budget_s=600, models_dir=tmp_path, targets=targets, rounds=1,
                               propose=_proposer(["greedy"], 1.0, 0))
    # the retrain, a fit from nothing on more samples, trains as long as the first fit even out of time
    details = {s.name: s.detail for s in result.stages}
    assert details["train"].startswith(f"{epochs} epochs") and details["retrain r1"].startswith(f"{epochs} epochs")
    card = result.card
    assert [r["round"] for r in result.plan_rounds] == [0, 1]
    for r in result.plan_rounds:  # one held-out instance (every third), greedy's plan of it, predicted vs measured
        assert r["n"] == 1 and r["plans"][0]["instance"] == targets[2].name and r["mape"] >= 0
        assert r["level"] > 0  # predicted at the machine's level read just before
    # the registered model is the one the last round measured: at that round's level
    assert card.level["factor"] == pytest.approx(result.plan_rounds[-1]["level"], abs=1e-4)
    # the round's model's own proposals on the two learning instances, before it trained on them; none after the last
    assert result.plan_rounds[0]["learning"]["n"] == 2 and "learning" not in result.plan_rounds[1]
    plan_level = card.accuracy["plan_level"]
    assert plan_level["heldout_instances"] == [targets[2].name] and len(plan_level["rounds"]) == 2
    # the learning instances' plans gave device samples, kept with where they came from
    with gzip.open(card.path.parent / "data" / "loop.jsonl.gz", "rt") as f:
        loop = [json.loads(line) for line in f if line.strip()]
    assert card.samples["proposed"] == len(loop) == targets[0].topology.num_devices + targets[1].topology.num_devices
    assert {d["origin"]["instance"] for d in loop} == {targets[0].name, targets[1].name}
    assert all(d["origin"]["round"] == 1 and d["origin"]["solver"] == "greedy" and d["fwd_compute"] > 0 for d in loop)
    # timed at round 0's level, kept at the samples' level (what the network learns)
    assert all(d["level"] == pytest.approx(result.plan_rounds[0]["level"], abs=1e-4) for d in loop)


# ---- solve --pick ---------------------------------------------------------------------------------------------------


def test_pick_returns_the_plan_the_judge_measured_fastest():
    """A deliberately overloaded candidate (every table on one device) loses to a balanced one."""
    from costmodels.registry import get_cost_model
    from shardopt.core.ir import Plan, Shard
    from shardopt.measure.compare import compare_plans
    from solvers.catalog import get_solver

    inst = load_instance(CPU_TEST / "cpu-test-s1-0008.json")  # 12 tables on 2 devices
    balanced = get_solver("greedy").solve(inst, get_cost_model("analytic"), seed=0).plan
    overloaded = Plan(shards=[Shard(table=t.name, device=0) for t in inst.tables])
    inst_roomy = inst.model_copy(update={"topology": inst.topology.model_copy(update={"memory_bytes": 10**12})})
    report = compare_plans(inst_roomy, [overloaded, balanced], ["overloaded", "balanced"], "cpu", reference="fastest",
                           time_cap_s=15)  # (a 2x difference: apart long before the intervals reach 2 %)
    assert report.plans[0].name == "balanced" and report.plans[0].cost_ms < report.plans[1].cost_ms
    assert report.comparisons[0].reference == "balanced" and report.comparisons[0].verdict == "slower"


@pytest.mark.integration
def test_solve_pick_measures_the_portfolio_and_returns_its_fastest(tmp_path: Path):
    out = tmp_path / "plan.json"
    r = run("solve", CPU_TEST / "cpu-test-s1-0008.json", "--pick", "cpu", "--portfolio", "greedy,size,round_robin",
            "-c", "analytic", "--time-limit", "1", "--pick-time", "8", "--out", out, "--json")
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    pick = doc["pick"]
    for session in (pick["compare"], pick["confirm"]):  # --pick-time caps each session (one round may run past it)
        if session is not None:
            assert session["stop"]["reason"] in ("converged", "time cap", "max rounds")
            assert session["stop"]["elapsed_s"] < 8 + 6, session["stop"]
    measured = {c["name"]: c["measured_ms"] for c in pick["candidates"] if c["measured_ms"] is not None}
    assert pick["winner"] in measured
    if pick["sessions"] == 1:  # clear in one session: the fastest of it
        assert measured[pick["winner"]] == min(measured.values())
    else:  # the close ones re-timed: the lowest over both sessions
        relative = pick["relative_to_fastest"]
        assert relative[pick["winner"]] == min(relative.values())
    assert doc["plan"]["solver"] == pick["winner"].split(" / ")[0]
    assert json.loads(out.read_text())["shards"] == doc["plan"]["shards"]
    # the analytic model chosen: no second model in the portfolio
    assert all(c["cost_model"] == "analytic" for c in pick["candidates"])
    bad = run("solve", CPU_TEST / "cpu-test-s1-0008.json", "--pick", "sim")
    assert bad.exit_code == 2 and "--pick: 'sim' is not cpu or cuda" in bad.stderr
    bad = run("solve", CPU_TEST / "cpu-test-s1-0008.json", "--pick", "cpu", "--portfolio", "greedy,nope")
    assert bad.exit_code == 2 and "unknown solver 'nope'" in bad.stderr
    bad = run("solve", CPU_TEST / "cpu-test-s1-0008.json", "--pick-time", "5")
    assert bad.exit_code == 2 and "--pick-time needs --pick" in bad.stderr


def test_auto_plans_host_memory_instances_with_the_cards_refitted_profile(tmp_path: Path):
    """The neural model has no host-memory tier: on an instance with host memory auto takes the card's analytic
    profile (which prices UVM reads) and says so, instead of a model the solvers' tiered layouts would break."""
    from costmodels.analytic import AnalyticCostModel

    card = _store_model(tmp_path, "mine", cpu_fingerprint())
    inst = load_instance(CPU_INSTANCE)
    tiered = inst.model_copy(update={"topology": inst.topology.model_copy(update={"host_memory_bytes": 10**9})})
    assert tiered.topology.has_host_memory
    choice = choose_cost_model("auto", tiered, tmp_path)
    assert choice.card_id == "mine" and isinstance(choice.model, AnalyticCostModel)
    assert choice.name == card.cost_model_name("analytic") and "host memory" in choice.notice
    plain = choose_cost_model("auto", inst, tmp_path)
    assert plain.card_id == "mine" and plain.name == card.cost_model_name("neural") and plain.notice is None


@pytest.mark.slow  # (make test-all; 14 s: it trains both RL policies)
def test_calibrate_with_policies_trains_them_on_the_model_and_keeps_only_a_winner(tmp_path: Path):
    from shardopt.measure.calibration import calibrate_machine, domain_settings

    targets = [load_instance(CPU_TEST / f"cpu-test-s1-00{i}.json") for i in ("08", "09")]
    settings = domain_settings("cpu", "cpu", targets, train_samples=12, test_samples=4, epochs=2, repeats=1)
    from solvers.rl.train import train_policies_for

    result = calibrate_machine(settings, cpu_fingerprint(), budget_s=600, models_dir=tmp_path, targets=targets,
                               policies=("dreamshard",), policy_episodes=32, train_policies=train_policies_for)
    stage = next(s for s in result.stages if s.name == "policy dreamshard")
    assert "32 episodes" in stage.detail and "against the shipped policy" in stage.detail
    card = result.card
    kept = "kept" in stage.detail and "not kept" not in stage.detail
    assert ("dreamshard" in card.policies) == kept
    if kept:  # the card carries it, beside the card
        assert card.policy_path("dreamshard").is_file() and load_card(card.path).policies == card.policies
    with pytest.raises(Exception, match="--for"):
        calibrate_machine(settings, cpu_fingerprint(), budget_s=60, models_dir=tmp_path, policies=("dreamshard",))


def test_an_rl_solver_uses_the_policy_its_cost_models_card_carries(tmp_path: Path):
    """Searching with a model whose card carries a dreamshard policy, dreamshard rolls that policy out (unless a
    checkpoint is named); with another model, the shipped one."""
    from solvers.catalog import get_solver
    from solvers.rl.common import CHECKPOINT_DIR

    folder = tmp_path / "mine"
    card = _store_model(tmp_path, "mine", cpu_fingerprint())
    solver = get_solver("dreamshard")
    (folder / "policies").mkdir()
    shutil.copyfile(CHECKPOINT_DIR / solver.default_checkpoint, folder / "policies" / "dreamshard.npz")
    replace(card, policies={"dreamshard": "policies/dreamshard.npz"}, path=None).save(folder / "card.json")
    card = load_card(folder / "card.json")
    inst = load_instance(CPU_TEST / "cpu-test-s1-0008.json")
    from costmodels.registry import get_cost_model

    mine = get_cost_model(card.cost_model_name(), tmp_path)
    r = solver.solve(inst, mine, seed=0)
    assert r.info["policy_from_card"] == "mine" and r.info["policy"] == str(folder.resolve() / "policies" / "dreamshard.npz")
    r = solver.solve(inst, get_cost_model("analytic"), seed=0)
    assert "policy_from_card" not in r.info and r.info["policy"] == str(CHECKPOINT_DIR / solver.default_checkpoint)
    named = get_solver("dreamshard", checkpoint=str(CHECKPOINT_DIR / solver.default_checkpoint))
    assert "policy_from_card" not in named.solve(inst, mine, seed=0).info
    # a card naming a policy file that is not there is refused, naming the field
    (folder / "policies" / "dreamshard.npz").unlink()
    with pytest.raises(CardError, match="policies.dreamshard"):
        load_card(folder / "card.json")


def test_costmodel_list_fits_100_columns_and_show_gives_the_card(tmp_path: Path):
    """One line per model on a terminal of normal width; the whole card behind `costmodel show ID`."""
    _store_model(tmp_path, "mine-with-a-long-store-id", cpu_fingerprint())
    r = run("costmodel", "list", "--models", tmp_path, env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert max(len(line) for line in lines) <= 100
    for model_id in ("mine-with-a-long-store-id", "calibrated-cpu-epyc-f25m17", "neural-h200-torch"):
        assert sum(model_id in line for line in lines) == 1, model_id  # (its id whole, on one line)
    r = run("costmodel", "show", "calibrated-cpu-epyc-f25m17", "--models", tmp_path, env={"COLUMNS": "100"})
    assert r.exit_code == 0, r.output
    assert "family 25 model 17" in r.stdout and "tables per device" in r.stdout and "shardopt calibrate" in r.stdout
    doc = json.loads(run("costmodel", "show", "neural-cpu-zen5", "--models", tmp_path, "--json").stdout)
    assert doc["id"] == "neural-cpu-zen5" and doc["source"] == "shipped"
    r = run("costmodel", "show", "no-such-model", "--models", tmp_path)
    assert r.exit_code == 2 and "no calibrated model 'no-such-model'" in r.stderr
