// @ts-check
// A form generated from a JSON Schema object: string / number / integer / boolean / enum properties
// become text / number / checkbox / select fields; required ones are marked and checked.

import { h, uid } from "./dom.js";

const STRING_FORMATS = { email: "email", uri: "url", url: "url", date: "date", time: "time", "date-time": "datetime-local" };

/** One field: its <div>, its control, and read() → {ok, present, value} (showing any problem). */
function field(name, schema, required) {
  const id = uid("field");
  const hintId = schema.description ? `${id}-hint` : null;
  const errorId = `${id}-error`;
  const title = String(schema.title ?? name);
  const label = h("label", { for: id }, title, required ? h("span", { class: "required", "aria-hidden": "true" }, " *") : null);
  const hint = hintId ? h("small", { class: "hint", id: hintId }, String(schema.description)) : null;
  const error = h("p", { class: "field-error", id: errorId, hidden: true });
  const describedBy = [hintId, errorId].filter(Boolean).join(" ");
  const common = { id, name, "aria-describedby": describedBy, required: required || null };
  let control;
  let read;

  if (Array.isArray(schema.enum)) {
    const choices = schema.enum;
    control = h("select", common, h("option", { value: "" }, required ? "Choose…" : "(none)"));
    choices.forEach((choice, index) => control.append(h("option", { value: String(index) }, String(choice))));
    if (schema.default !== undefined && choices.includes(schema.default)) control.value = String(choices.indexOf(schema.default));
    read = () => (control.value === "" ? { present: false } : { present: true, value: choices[Number(control.value)] });
  } else if (schema.type === "boolean") {
    control = h("input", { ...common, type: "checkbox", required: null, checked: schema.default === true });
    read = () => ({ present: true, value: control.checked });
  } else if (schema.type === "number" || schema.type === "integer") {
    const integer = schema.type === "integer";
    control = h("input", {
      ...common,
      type: "number",
      inputmode: integer ? "numeric" : "decimal",
      step: integer ? "1" : "any",
      min: schema.minimum ?? null,
      max: schema.maximum ?? null,
      value: typeof schema.default === "number" ? schema.default : null,
    });
    read = () => (control.value === "" ? { present: false } : { present: true, value: Number(control.value) });
  } else if (schema.type === "string" || schema.type === undefined) {
    control = h("input", {
      ...common,
      type: STRING_FORMATS[schema.format] ?? "text",
      minlength: schema.minLength ?? null,
      maxlength: schema.maxLength ?? null,
      pattern: schema.pattern ?? null,
      value: typeof schema.default === "string" ? schema.default : null,
    });
    read = () => (control.value === "" ? { present: false } : { present: true, value: control.value });
  } else {
    // objects and arrays: typed as JSON
    control = h("textarea", { ...common, rows: 3, placeholder: `JSON ${schema.type}` });
    read = () => {
      if (control.value.trim() === "") return { present: false };
      try {
        return { present: true, value: JSON.parse(control.value) };
      } catch {
        return { present: true, invalid: `Enter valid JSON (${schema.type}).` };
      }
    };
  }

  const check = () => {
    const got = read();
    let problem = got.invalid ?? "";
    if (!problem && required && !got.present) problem = "This field is required.";
    if (!problem && !control.checkValidity()) problem = control.validationMessage;
    error.textContent = problem;
    error.hidden = !problem;
    if (problem) control.setAttribute("aria-invalid", "true");
    else control.removeAttribute("aria-invalid");
    return { ok: !problem, ...got };
  };
  const el =
    control.type === "checkbox"
      ? h("div", { class: "field field-check" }, control, label, hint, error)
      : h("div", { class: "field" }, label, hint, control, error);
  return { el, control, read: check };
}

/**
 * Build a <form> for `schema` (a JSON Schema object); without one, a single required text answer.
 * read() returns the values object, or null after showing what to fix and focusing the first problem.
 */
export function buildForm(schema) {
  const usable = schema && typeof schema === "object" && schema.properties && typeof schema.properties === "object";
  const properties = usable ? schema.properties : { answer: { type: "string", title: "Your answer" } };
  const required = new Set(usable ? schema.required ?? [] : ["answer"]);
  /** @type {[string, {el: HTMLElement, control: any, read: () => any}][]} */
  const fields = Object.entries(properties).map(([name, prop]) => [name, field(name, prop ?? {}, required.has(name))]);
  const el = h("form", { class: "form", novalidate: true });
  if (fields.some(([name]) => required.has(name))) {
    el.append(h("p", { class: "hint" }, "Fields marked * are required."));
  }
  for (const [, f] of fields) el.append(f.el);

  return {
    el,
    read() {
      const values = {};
      let firstBad = null;
      for (const [name, f] of fields) {
        const got = f.read();
        if (!got.ok) firstBad ??= f.control;
        else if (got.present) values[name] = got.value;
      }
      if (firstBad) {
        firstBad.focus();
        return null;
      }
      return values;
    },
  };
}
