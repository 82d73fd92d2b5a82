// Offline schema validation of Kubernetes objects.
//
//   node validate.mjs < objects.json      # [{"file": "...", "object": {...}}, ...]
//
// Two passes per object:
//  1. the JSON schema: kubernetes-models (validators compiled from the Kubernetes OpenAPI
//     spec) and @kubernetes-models/prometheus-operator (from the operator's CRDs). Catches
//     wrong types, missing required fields, bad enums.
//  2. strict fields, as `kubectl apply --validate=strict` would: a field the schema does
//     not know is an error (a typo like readOnlyRootFileSystem is otherwise ignored by the
//     API server's older modes and the pod silently runs unhardened). The field lists
//     come from the packages' type declarations (.d.ts), which mirror the same spec; CRD
//     kinds, whose declarations inline their types, get pass 1 only.
// Prints one line per problem ("file: Kind/name: path: message"); exits 1 on any.
import fs from "node:fs";
import path from "node:path";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = path.dirname(fileURLToPath(import.meta.url));
const modulesDir = process.env.KUBEVALIDATE_MODULES || path.join(here, "node_modules");

// apiVersion -> [package, directory inside it]
function modelPath(apiVersion, kind) {
  const [group, version] = apiVersion.includes("/") ? apiVersion.split("/") : ["", apiVersion];
  if (group === "monitoring.coreos.com") {
    return { pkg: "@kubernetes-models/prometheus-operator", rel: `${group}/${version}/${kind}` };
  }
  return { pkg: "kubernetes-models", rel: group ? `${group}/${version}/${kind}` : `${version}/${kind}` };
}

// ---- strict fields from .d.ts ------------------------------------------------------
const ifaceCache = new Map();

function packageRoot(pkg) {
  return path.join(modulesDir, ...pkg.split("/"));
}

// The property list of an object type's body: {name -> type text}, or null. Only the
// outermost properties count (inline object types nest deeper).
function parseProps(body) {
  const starts = [...body.matchAll(/^( *)"([^"]+)"\??: /gm)];
  if (starts.length === 0) return null;
  const indent = Math.min(...starts.map((m) => m[1].length));
  const top = starts.filter((m) => m[1].length === indent);
  const props = new Map();
  top.forEach((m, i) => {
    const end = i + 1 < top.length ? top[i + 1].index : body.length;
    props.set(m[2], body.slice(m.index + m[0].length, end).trim().replace(/;$/, ""));
  });
  return props;
}

// {props, imports} of the first interface a .d.ts declares, or null.
function loadInterface(dtsPath) {
  if (ifaceCache.has(dtsPath)) return ifaceCache.get(dtsPath);
  let result = null;
  if (fs.existsSync(dtsPath)) {
    const text = fs.readFileSync(dtsPath, "utf8").replace(/\/\*\*[\s\S]*?\*\//g, "");
    const imports = new Map();
    for (const m of text.matchAll(/import \{ (\w+) \} from "([^"]+)";/g)) {
      let target = m[2];
      if (target.startsWith(".")) {
        target = path.resolve(path.dirname(dtsPath), target);
      } else {
        const parts = target.split("/");
        const n = target.startsWith("@") ? 2 : 1;
        target = path.join(packageRoot(parts.slice(0, n).join("/")), ...parts.slice(n));
      }
      imports.set(m[1], target.replace(/\.js$/, "") + ".d.ts");
    }
    const body = text.match(/export interface I\w+(?: extends [\w, ]+)? \{([\s\S]*?)\n\}/);
    const props = body && parseProps(body[1]);
    if (props) result = { props, imports };
  }
  ifaceCache.set(dtsPath, result);
  return result;
}

// What a type text says about the value's fields; null when it says nothing checkable
// (scalars, unions, types without a declaration).
function describe(type, imports) {
  type = type.trim().replace(/;$/, "");
  let array = false;
  if (type.startsWith("Array<") && type.endsWith(">")) {
    array = true;
    type = type.slice(6, -1).trim();
  }
  let d = null;
  if (type.startsWith("{") && type.endsWith("}")) {
    const inner = type.slice(1, -1);
    const map = inner.match(/^\s*\[key: string\]: ([\s\S]*)$/);
    if (map) {
      const of = describe(map[1], imports);
      d = of && { kind: "map", of };
    } else {
      const props = parseProps(inner);
      d = props && { kind: "object", props, imports };
    }
  } else if (/^I\w+$/.test(type) && imports.has(type)) {
    d = { kind: "ref", path: imports.get(type) };
  }
  if (!d) return null;
  return array ? { kind: "array", of: d } : d;
}

function strictCheck(value, desc, where, errors) {
  if (!desc || value === null || typeof value !== "object") return;
  if (desc.kind === "array") {
    if (Array.isArray(value)) value.forEach((v, i) => strictCheck(v, desc.of, `${where}[${i}]`, errors));
    return;
  }
  if (Array.isArray(value)) return;
  if (desc.kind === "map") {
    for (const [k, v] of Object.entries(value)) strictCheck(v, desc.of, `${where}[${k}]`, errors);
    return;
  }
  let props = desc.props, imports = desc.imports;
  if (desc.kind === "ref") {
    const iface = loadInterface(desc.path);
    if (!iface) return;
    ({ props, imports } = iface);
  }
  for (const [key, child] of Object.entries(value)) {
    const type = props.get(key);
    if (type === undefined) {
      errors.push(`${where}.${key}: unknown field (known: ${[...props.keys()].join(", ")})`);
      continue;
    }
    strictCheck(child, describe(type, imports), `${where}.${key}`, errors);
  }
}

// ---- main --------------------------------------------------------------------------
const input = JSON.parse(fs.readFileSync(0, "utf8"));
let failures = 0;
const kinds = new Map();
for (const { file, object } of input) {
  const name = `${object.kind}/${object.metadata?.name ?? "?"}`;
  const report = (msg) => {
    console.log(`${file}: ${name}: ${msg}`);
    failures++;
  };
  if (!object.apiVersion || !object.kind) {
    report("no apiVersion or kind");
    continue;
  }
  const { pkg, rel } = modelPath(object.apiVersion, object.kind);
  let Model;
  try {
    const mod = await import(pathToFileURL(path.join(packageRoot(pkg), `${rel}.js`)).href);
    Model = mod[object.kind];
  } catch (e) {
    report(`no schema for apiVersion ${object.apiVersion} kind ${object.kind} (${e.code ?? e.message})`);
    continue;
  }
  try {
    new Model(object).validate();
  } catch (e) {
    for (const line of String(e.message).split(", ")) report(`schema: ${line}`);
  }
  const errors = [];
  strictCheck(object, { kind: "ref", path: path.join(packageRoot(pkg), `${rel}.d.ts`) }, "", errors);
  for (const err of errors) report(`strict: ${err.replace(/^\./, "")}`);
  kinds.set(object.kind, (kinds.get(object.kind) ?? 0) + 1);
}
const summary = [...kinds].map(([k, n]) => `${n} ${k}`).join(", ");
if (failures > 0) {
  console.log(`kubevalidate: ${failures} problem(s)`);
  process.exit(1);
}
console.log(`kubevalidate: ${input.length} objects valid (${summary})`);
