// Parses PromQL expressions with Prometheus's own grammar (@prometheus-io/lezer-promql, the one
// the Prometheus UI uses) and reports, per expression, the syntax errors and what it uses:
// metric selectors (name, label matchers, the range function around them), aggregations
// (grouping labels, metrics below them) and function calls. deploy/tools/checks.py judges the
// result against the metrics the Rust sources register.
//
// stdin: JSON [{"id": "...", "expr": "..."}]; stdout: JSON [{"id", "errors", "selectors",
// "aggregations", "calls"}]. Run with NODE_PATH pointing at the installed packages.

import { parser } from '@prometheus-io/lezer-promql';

const RANGE_FUNCTIONS = new Set([
  'rate', 'irate', 'increase', 'delta', 'idelta', 'deriv', 'resets', 'changes',
  'avg_over_time', 'min_over_time', 'max_over_time', 'sum_over_time', 'count_over_time',
  'quantile_over_time', 'stddev_over_time', 'stdvar_over_time', 'last_over_time',
  'present_over_time', 'absent_over_time', 'predict_linear', 'holt_winters',
]);

function children(node) {
  const out = [];
  for (let c = node.firstChild; c; c = c.nextSibling) out.push(c);
  return out;
}

function descendants(node, name) {
  const out = [];
  const walk = (n) => {
    if (n.name === name) out.push(n);
    for (const c of children(n)) walk(c);
  };
  walk(node);
  return out;
}

function text(src, node) {
  return src.slice(node.from, node.to);
}

// The argument nodes of a FunctionCall (the expressions inside FunctionCallBody).
function callArgs(call) {
  const body = children(call).find((c) => c.name === 'FunctionCallBody');
  return body ? children(body).filter((c) => !c.type.isError) : [];
}

function functionName(src, call) {
  const id = children(call).find((c) => c.name === 'FunctionIdentifier');
  return id ? text(src, id) : '';
}

function analyse(src) {
  const tree = parser.parse(src);
  const top = tree.topNode;
  const errors = [];
  tree.iterate({
    enter(n) {
      if (n.type.isError) {
        errors.push({ at: n.from, near: src.slice(Math.max(0, n.from - 15), n.from + 15) });
      }
    },
  });
  const selectors = descendants(top, 'VectorSelector').map((vs) => {
    const id = children(vs).find((c) => c.name === 'Identifier');
    const labels = descendants(vs, 'LabelName').map((l) => text(src, l));
    let fn = null;
    const parent = vs.parent;
    if (parent && parent.name === 'MatrixSelector') {
      let p = parent.parent;
      while (p && p.name !== 'FunctionCall' && p.name !== 'PromQL') p = p.parent;
      if (p && p.name === 'FunctionCall') fn = functionName(src, p);
    }
    return { metric: id ? text(src, id) : null, labels, range: parent?.name === 'MatrixSelector', fn };
  });
  const aggregations = descendants(top, 'AggregateExpr').map((agg) => {
    const mod = children(agg).find((c) => c.name === 'AggregateModifier');
    let modifier = null;
    let labels = [];
    if (mod) {
      modifier = children(mod).find((c) => c.name === 'By') ? 'by' : 'without';
      labels = descendants(mod, 'LabelName').map((l) => text(src, l));
    }
    const metrics = descendants(agg, 'VectorSelector')
      .map((vs) => children(vs).find((c) => c.name === 'Identifier'))
      .filter(Boolean)
      .map((id) => text(src, id));
    return { op: text(src, children(agg)[0]), modifier, labels, metrics };
  });
  const calls = descendants(top, 'FunctionCall').map((call) => {
    const name = functionName(src, call);
    const args = callArgs(call);
    const info = { name, args: args.map((a) => a.name) };
    if (name === 'histogram_quantile' && args[1]) {
      const agg = args[1].name === 'AggregateExpr' ? args[1] : null;
      const mod = agg && children(agg).find((c) => c.name === 'AggregateModifier');
      info.grouped_by = mod && children(mod).find((c) => c.name === 'By')
        ? descendants(mod, 'LabelName').map((l) => text(src, l))
        : null;
    }
    if (RANGE_FUNCTIONS.has(name)) info.range_function = true;
    return info;
  });
  return { errors, selectors, aggregations, calls };
}

let input = '';
process.stdin.setEncoding('utf8');
process.stdin.on('data', (d) => { input += d; });
process.stdin.on('end', () => {
  const items = JSON.parse(input);
  const out = items.map(({ id, expr }) => ({ id, ...analyse(expr) }));
  process.stdout.write(JSON.stringify(out));
});
