// The message as the page shows it: the host's raw text split by its own
// delimiters into segment → field → repetition → component → subcomponent,
// each with the location path the host's patches take (`PID.5.1`,
// `OBX[2].5`, `PID.3[2].1`). Display only: the host parses and edits; a
// value is shown as the text it is (escape sequences such as `\S\` kept).

/** The delimiters MSH declares. */
export function delimiters(text) {
  const field = text.startsWith('MSH') && text.length > 3 ? text[3] : '|';
  const enc = text.slice(4, 8);
  return {
    field,
    component: enc[0] || '^',
    repetition: enc[1] || '~',
    escape: enc[2] || '\\',
    subcomponent: enc[3] || '&',
  };
}

export function segmentLines(text) {
  return text.split(/\r\n|\r|\n/).filter((line) => line.length > 0);
}

/**
 * The tree: [{name, path, fields: [{number, path, value, reps: [{path, value,
 * components: [{path, value, subs: [{path, value}]}]}]}]}]. A level with one
 * element is not split further in paths (`PID.5.1`, not `PID.5[1].1.1`).
 */
export function parse(text) {
  const d = delimiters(text);
  const seen = new Map();
  return segmentLines(text).map((line) => {
    const name = line.slice(0, 3);
    const occurrence = (seen.get(name) || 0) + 1;
    seen.set(name, occurrence);
    const path = occurrence > 1 ? `${name}[${occurrence}]` : name;
    const parts = line.split(d.field);
    const fields = [];
    if (name === 'MSH') {
      fields.push({ number: 1, path: `${path}.1`, value: d.field, fixed: true, reps: [] });
      fields.push({ number: 2, path: `${path}.2`, value: parts[1] || '', fixed: true, reps: [] });
      for (let i = 2; i < parts.length; i++) fields.push(field(path, i + 1, parts[i], d));
    } else {
      for (let i = 1; i < parts.length; i++) fields.push(field(path, i, parts[i], d));
    }
    return { name, path, line, fields };
  });
}

function field(segmentPath, number, value, d) {
  const path = `${segmentPath}.${number}`;
  const texts = value.split(d.repetition);
  const reps = texts.map((rep, i) => {
    const repPath = texts.length > 1 ? `${path}[${i + 1}]` : path;
    const comps = rep.split(d.component);
    const components = comps.length > 1 || rep.includes(d.subcomponent)
      ? comps.map((comp, j) => {
        const compPath = `${repPath}.${j + 1}`;
        const subs = comp.split(d.subcomponent);
        return {
          path: compPath,
          value: comp,
          subs: subs.length > 1 ? subs.map((sub, k) => ({ path: `${compPath}.${k + 1}`, value: sub })) : [],
        };
      })
      : [];
    return { path: repPath, value: rep, components };
  });
  return { number, path, value, reps };
}

/**
 * Field names from the extensions' merged schema, by path without
 * repetitions and occurrences (`PID.5`, `PID.5.1`). Reads Hermes' field
 * lists (`{segments: {PID: {fields: [{field: 5, component: 1, name}]}}}`)
 * and plain nesting (`{PID: {"5": {name, "1": {name}}}}`).
 */
export function fieldNames(schema) {
  const names = new Map();
  if (!schema || typeof schema !== 'object') return names;
  const label = (entry) => entry && (entry.name || entry.label || entry.description || entry.note);
  for (const [segment, spec] of Object.entries(schema.segments || {})) {
    if (label(spec)) names.set(segment, label(spec));
    for (const entry of Array.isArray(spec?.fields) ? spec.fields : []) {
      if (!label(entry) || entry.field === undefined) continue;
      const at = entry.component !== undefined ? `${segment}.${entry.field}.${entry.component}` : `${segment}.${entry.field}`;
      names.set(at, label(entry));
    }
  }
  for (const [segment, spec] of Object.entries(schema)) {
    if (!/^[A-Z][A-Z0-9]{2}$/.test(segment) || typeof spec !== 'object' || spec === null) continue;
    for (const [number, fieldSpec] of Object.entries(spec)) {
      if (!/^\d+$/.test(number) || typeof fieldSpec !== 'object' || fieldSpec === null) continue;
      if (label(fieldSpec)) names.set(`${segment}.${number}`, label(fieldSpec));
      for (const [comp, compSpec] of Object.entries(fieldSpec)) {
        if (/^\d+$/.test(comp) && label(compSpec)) names.set(`${segment}.${number}.${comp}`, label(compSpec));
      }
    }
  }
  return names;
}

/** A location's name key: `OBX[2].5[3].1` → `OBX.5.1`. */
export function nameKey(path) {
  return path.replace(/\[\d+\]/g, '');
}
