"""Provides LaunchFormScreen: the modal that edits the job, marks bad fields, previews commands."""

from __future__ import annotations

from pathlib import Path
from typing import ClassVar

from textual import on
from textual.app import ComposeResult
from textual.binding import Binding, BindingType
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widget import Widget
from textual.widgets import Button, Footer, Input, Label, Select, Static

from ddptui.core.job.profiles import ProfileError, ProfileSet, load_profiles
from ddptui.core.job.resolve import spec_for_profile
from ddptui.core.job.spec import JobSpec, SpecError
from ddptui.ui.job_form import FIELDS, FormCheck, JobRequest, check_form, values_from_spec
from ddptui.ui.preview import preview_lines
from ddptui.ui.widgets.form_field import FormField
from ddptui.ui.widgets.job_panel import describe_commands

_BACKENDS = [
    ("local — this machine", "local"),
    ("ssh — a list of hosts", "ssh"),
    ("slurm", "slurm"),
]
_CHOICES: dict[str, list[tuple[str, str]]] = {
    "backend": _BACKENDS,
    "container_engine": [("podman", "podman"), ("docker", "docker"), ("pyxis (srun)", "pyxis")],
    "slurm_mode": [
        ("auto — the allocation I am in, else salloc", "auto"),
        ("salloc — a new allocation", "salloc"),
        ("existing — $SLURM_JOB_ID", "existing"),
        ("sbatch — a batch job", "sbatch"),
    ],
    "slurm_launch": [("torchrun on each node", "torchrun"), ("srun, one task per process", "srun")],
}
# (section title, css id, [(field id, label, hint)])
_SECTIONS: list[tuple[str, str, list[tuple[str, str, str]]]] = [
    (
        "Job",
        "sec-job",
        [
            ("backend", "backend", "where the nodes come from"),
            ("nodes", "nodes", "how many nodes"),
            ("nproc_per_node", "procs per node", "torchrun --nproc_per_node"),
            ("script", "script", "the training script (on the nodes)"),
            ("script_args", "arguments", "the script's arguments, quoted as in a shell"),
            ("workdir", "workdir", "working directory on the nodes"),
            ("env", "environment", "NAME=VALUE ... for every rank"),
            ("activate", "activation", "shell step before torchrun, e.g. conda activate env"),
            ("rdzv_port", "rdzv port", "empty: chosen at launch"),
        ],
    ),
    ("SSH", "sec-ssh", [("hosts", "hosts", "a,b or node[01-04]")]),
    (
        "Slurm",
        "sec-slurm",
        [
            ("slurm_mode", "allocation", ""),
            ("slurm_launch", "launch", ""),
            ("partition", "partition", ""),
            ("time", "time limit", "e.g. 01:00:00"),
            ("gres", "gres", "e.g. gpu:8"),
            ("slurm_args", "extra args", "more salloc/sbatch arguments"),
        ],
    ),
    (
        "Container",
        "sec-container",
        [
            ("container_image", "image", "empty: no container"),
            ("container_engine", "engine", ""),
            ("container_mounts", "mounts", "SRC:DST ..."),
        ],
    ),
]


class LaunchFormScreen(ModalScreen[JobRequest | None]):
    """Edits a copy of the job; dismisses with a JobRequest (apply, or apply and launch)."""

    BINDINGS: ClassVar[list[BindingType]] = [
        Binding("ctrl+s", "apply", "Apply", id="form.apply"),
        Binding("ctrl+l", "launch", "Launch", id="form.launch"),
        Binding("f2", "preview", "Show command", id="form.preview"),
        Binding("escape", "cancel", "Cancel", id="form.cancel"),
    ]

    def __init__(
        self, spec: JobSpec, profiles: ProfileSet | None = None, cwd: Path | None = None
    ) -> None:
        super().__init__()
        self.base = spec
        self.cwd = cwd
        self.profile_problem = ""
        if profiles is None:
            try:
                profiles = load_profiles(cwd)
            except ProfileError as exc:
                self.profile_problem = str(exc)
        self.profiles = profiles
        self.check: FormCheck = check_form(values_from_spec(spec), spec, cwd)
        self.preview_shown = False
        self.fields = {
            f: self._field(f, label, hint) for _t, _i, rows in _SECTIONS for f, label, hint in rows
        }

    def _field(self, field_id: str, label: str, hint: str) -> FormField:
        value = values_from_spec(self.base)[field_id]
        control: Widget
        if field_id in _CHOICES:
            control = Select(
                _CHOICES[field_id], value=value, allow_blank=False, id=field_id, compact=True
            )
        else:
            control = Input(value, id=field_id, placeholder=hint, compact=True)
        return FormField(field_id, label, control, hint)

    def compose(self) -> ComposeResult:
        with Vertical(classes="dialog form"):
            yield Label("Edit the job", classes="dialog-question")
            yield self._profile_picker()
            with VerticalScroll(id="form-fields"):
                for title, css_id, rows in _SECTIONS:
                    with Vertical(id=css_id, classes="form-section") as section:
                        section.border_title = title
                        for field_id, _label, _hint in rows:
                            yield self.fields[field_id]
                yield Static("", id="preview", classes="form-preview")
            yield Static("", id="form-status", classes="dialog-note")
            with Horizontal(classes="dialog-buttons"):
                yield Button("Show command", id="preview-button")
                yield Button("Apply", id="apply")
                yield Button("Launch", variant="primary", id="launch")
                yield Button("Cancel", id="cancel")
        yield Footer()

    def _profile_picker(self) -> Widget:
        names = self.profiles.names() if self.profiles else []
        options = [
            (f"{n} — {self.profiles.profiles[n].description}" if self.profiles else n, n)
            for n in names
        ]
        picker: Select[str] = Select(options, prompt="load a profile…", id="profile", compact=True)
        return FormField("profile", "profile", picker, "replace the fields with a profile's job")

    def on_mount(self) -> None:
        if self.profile_problem:
            self.fields_profile.error = self.profile_problem.splitlines()[0]
        self._show_sections(self.base.backend)
        self._show_check()
        self.query_one("#nodes", Input).focus()

    @property
    def fields_profile(self) -> FormField:
        return self.query_one("#field-profile", FormField)

    # -- reading and checking the fields ----------------------------------------------------

    def values(self) -> dict[str, str]:
        out = {}
        for field_id, form_field in self.fields.items():
            value = getattr(form_field.control, "value", "")
            out[field_id] = "" if value is Select.BLANK else str(value)
        return out

    def recheck(self) -> FormCheck:
        self.check = check_form(self.values(), self.base, self.cwd)
        self._show_check()
        return self.check

    def _show_check(self) -> None:
        for field_id, form_field in self.fields.items():
            form_field.error = self.check.errors.get(field_id, "")
        count = len(self.check.errors)
        status = self.query_one("#form-status", Static)
        status.update(
            f"✗ {count} field(s) need attention before launch"
            if count
            else f"✓ ready: world size {self.check.spec.world_size if self.check.spec else '?'}"
        )
        status.set_class(bool(count), "-invalid")
        for button in ("#apply", "#launch"):
            self.query_one(button, Button).disabled = not self.check.ok
        self.refresh_bindings()
        if self.preview_shown:
            self._show_preview()

    def _show_sections(self, backend: str) -> None:
        self.query_one("#sec-ssh").display = backend == "ssh"
        self.query_one("#sec-slurm").display = backend == "slurm"

    def _show_preview(self) -> None:
        preview = self.query_one("#preview", Static)
        preview.display = self.preview_shown
        if self.check.spec is None:
            preview.update("fix the marked fields to see each node's command")
            return
        try:
            lines = preview_lines(self.check.spec)
        except (SpecError, ValueError) as exc:
            preview.update(f"no preview: {exc}")
            return
        preview.update(describe_commands(lines, "each node will run (run id and port at launch):"))

    @on(Input.Changed)
    def _input_changed(self, event: Input.Changed) -> None:
        self.recheck()

    @on(Select.Changed)
    def _select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "profile":
            if event.value is not Select.BLANK:
                self.load_profile(str(event.value))
            return
        if event.select.id == "backend":
            self._show_sections(str(event.value))
        self.recheck()

    def load_profile(self, name: str) -> None:
        """Replace every field with the profile's job (CLI flags are not re-applied)."""
        try:
            spec = spec_for_profile(name, self.profiles)
        except SpecError as exc:
            self.fields_profile.error = str(exc)
            return
        self.fields_profile.error = ""
        self.base = spec
        values = values_from_spec(spec)
        for field_id in FIELDS:
            control = self.fields[field_id].control
            if isinstance(control, Input | Select):
                control.value = values[field_id]
        self._show_sections(spec.backend)
        self.recheck()

    # -- actions ----------------------------------------------------------------------------

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        if action in ("apply", "launch"):
            return True if self.check.ok else None
        return True

    def action_apply(self) -> None:
        self._finish(launch=False)

    def action_launch(self) -> None:
        self._finish(launch=True)

    def action_preview(self) -> None:
        self.preview_shown = not self.preview_shown
        self.query_one("#preview-button", Button).label = (
            "Hide command" if self.preview_shown else "Show command"
        )
        self._show_preview()
        if self.preview_shown:
            self.query_one("#form-fields", VerticalScroll).scroll_end(animate=False)

    def action_cancel(self) -> None:
        self.dismiss(None)

    def _finish(self, launch: bool) -> None:
        check = self.recheck()
        if check.ok and check.spec is not None:
            self.dismiss(JobRequest(check.spec, launch))

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        actions = {
            "apply": self.action_apply,
            "launch": self.action_launch,
            "preview-button": self.action_preview,
            "cancel": self.action_cancel,
        }
        actions[event.button.id or "cancel"]()
