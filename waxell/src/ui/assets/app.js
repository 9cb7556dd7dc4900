// waxell ui: the run list and the run page. Every value that comes from a span is put into the page as
// text (textContent, or an attribute set with setAttribute that is never an event handler or a link);
// the only links are to this app's own pages, built from ids the server checked are hex; the only images
// are data: URLs of an allowed image type over checked base64. Nothing here uses innerHTML.
'use strict';

(function () {
  const main = document.getElementById('main');
  const live = document.getElementById('live');

  // ---- DOM helpers -------------------------------------------------------------------------------------

  function el(tag, props, ...children) {
    const e = document.createElement(tag);
    if (props) {
      for (const [k, v] of Object.entries(props)) {
        if (v === undefined || v === null || v === false) continue;
        if (k === 'class') e.className = v;
        else if (k === 'text') e.textContent = String(v);
        else if (k === 'href') e.setAttribute('href', ownHref(v));
        else if (k === 'onclick') e.addEventListener('click', v);
        else if (k === 'onchange') e.addEventListener('change', v);
        else if (k === 'oninput') e.addEventListener('input', v);
        else if (k === 'style') Object.assign(e.style, v);
        else if (k.startsWith('on')) throw new Error('no inline handlers');
        else e.setAttribute(k, String(v));
      }
    }
    append(e, children);
    return e;
  }

  function append(parent, children) {
    for (const c of children) {
      if (c === undefined || c === null || c === false) continue;
      if (Array.isArray(c)) append(parent, c);
      else if (c instanceof Node) parent.appendChild(c);
      else parent.appendChild(document.createTextNode(String(c)));
    }
  }

  // Links only ever lead to this app's own pages.
  function ownHref(v) {
    const s = String(v);
    return s.startsWith('/') && !s.startsWith('//') && !s.includes('\\') ? s : '/';
  }

  const HEX_ID = /^[0-9a-f]{32}$/;
  function runHref(id) {
    return HEX_ID.test(id) ? '/runs/' + id : '/';
  }

  // ---- formatting --------------------------------------------------------------------------------------

  function fmtDur(ns) {
    if (!(ns >= 0)) return '';
    const ms = ns / 1e6;
    if (ms < 1) return (ns / 1e3).toFixed(0) + ' µs';
    if (ms < 1000) return ms.toFixed(ms < 10 ? 1 : 0) + ' ms';
    const s = ms / 1000;
    if (s < 60) return s.toFixed(2) + ' s';
    return Math.floor(s / 60) + ' min ' + Math.round(s % 60) + ' s';
  }
  function fmtTime(ns) {
    if (!ns || ns === Number.MAX_SAFE_INTEGER) return '';
    const d = new Date(ns / 1e6);
    const pad = (n, w) => String(n).padStart(w || 2, '0');
    return d.getFullYear() + '-' + pad(d.getMonth() + 1) + '-' + pad(d.getDate()) + ' ' +
      pad(d.getHours()) + ':' + pad(d.getMinutes()) + ':' + pad(d.getSeconds()) + '.' + pad(d.getMilliseconds(), 3);
  }
  function fmtCost(c) {
    if (c === undefined || c === null) return '';
    return '$' + (c < 0.01 ? c.toFixed(6) : c.toFixed(4));
  }
  function fmtNum(n) {
    return n === undefined || n === null ? '' : Number(n).toLocaleString('en-US');
  }
  function fmtScore(s) {
    if (s.label !== undefined && s.label !== null && s.label !== '') {
      return s.value !== undefined && s.value !== null && !/^(true|false)$/.test(s.label) ? s.label + ' (' + s.value + ')' : s.label;
    }
    return s.value === undefined || s.value === null ? '' : String(Math.round(s.value * 10000) / 10000);
  }
  function text(v) {
    if (v === undefined || v === null) return '';
    return typeof v === 'string' ? v : JSON.stringify(v, null, 2);
  }
  function parseJSON(v) {
    if (typeof v !== 'string') return v;
    const t = v.trim();
    if (!(t.startsWith('{') || t.startsWith('['))) return undefined;
    try { return JSON.parse(t); } catch (e) { return undefined; }
  }
  // A value as readable text: JSON pretty-printed, anything else as it is.
  function pretty(v) {
    const parsed = parseJSON(v);
    return parsed === undefined ? text(v) : JSON.stringify(parsed, null, 2);
  }

  // ---- images: only data: URLs of these types, over checked base64 ---------------------------------------

  const IMAGE_TYPES = { png: 'image/png', 'image/png': 'image/png', jpeg: 'image/jpeg', jpg: 'image/jpeg',
    'image/jpeg': 'image/jpeg', gif: 'image/gif', 'image/gif': 'image/gif', webp: 'image/webp', 'image/webp': 'image/webp' };
  const BASE64 = /^[A-Za-z0-9+/]+={0,2}$/;
  function image(mime, b64, alt) {
    const type = IMAGE_TYPES[String(mime).toLowerCase()];
    const data = typeof b64 === 'string' ? b64.replace(/\s+/g, '') : '';
    if (!type || data.length < 16 || !BASE64.test(data)) return null;
    const img = document.createElement('img');
    img.className = 'picture';
    img.alt = alt || 'image';
    img.src = 'data:' + type + ';base64,' + data;
    return img;
  }
  // Images anywhere in a JSON value: {png: b64}, {"image/png": b64}, {type: "blob", mime_type, content}.
  function imagesIn(value, out, depth) {
    out = out || [];
    depth = depth || 0;
    if (!value || typeof value !== 'object' || depth > 8 || out.length > 20) return out;
    if (Array.isArray(value)) {
      for (const v of value) imagesIn(v, out, depth + 1);
      return out;
    }
    if ((value.type === 'blob' || value.modality === 'image') && value.mime_type && typeof value.content === 'string') {
      const img = image(value.mime_type, value.content, 'image');
      if (img) out.push(img);
      return out;
    }
    for (const [k, v] of Object.entries(value)) {
      if (typeof v === 'string' && IMAGE_TYPES[k.toLowerCase()]) {
        const img = image(k, v, k);
        if (img) out.push(img);
      } else if (typeof v === 'object') {
        imagesIn(v, out, depth + 1);
      }
    }
    return out;
  }

  // ---- data ------------------------------------------------------------------------------------------

  async function getJSON(url) {
    const r = await fetch(url, { credentials: 'same-origin', headers: { accept: 'application/json' } });
    if (!r.ok) throw new Error(r.status + ' ' + (await r.text()));
    return r.json();
  }

  // The list redraws when anything changed; a run's page only when that run did. `seq` is the change
  // counter of what the view last drew (null: a run not stored yet), set by the view itself, so a change
  // that lands between drawing and the first poll still redraws.
  let seq = -1;
  let refresh = null;
  let watched = '';
  async function poll() {
    try {
      const s = await getJSON('/api/status' + (watched ? '?run=' + encodeURIComponent(watched) : ''));
      live.textContent = '● live · ' + fmtNum(s.runs) + ' runs · ' + fmtNum(s.spans) + ' spans';
      live.className = 'ok';
      const now = watched ? s.run_seq : s.seq;
      if (now !== seq && refresh) await refresh();
    } catch (e) {
      live.textContent = '○ disconnected';
      live.className = 'err';
    }
    setTimeout(poll, 1000);
  }

  // ---- run list ----------------------------------------------------------------------------------------

  const RANGES = [['', 'any time'], ['900', 'last 15 min'], ['3600', 'last hour'], ['86400', 'last 24 h'], ['604800', 'last 7 days']];

  function listView() {
    const params = new URLSearchParams(location.search);
    const state = {
      agent: params.get('agent') || '', session: params.get('session') || '', user: params.get('user') || '',
      status: params.get('status') || '', range: params.get('range') || '', q: params.get('q') || '',
    };
    const agentSel = el('select', { name: 'agent', onchange: () => { state.agent = agentSel.value; load(); } },
      el('option', { value: '', text: 'all agents' }));
    const statusSel = el('select', { name: 'status', onchange: () => { state.status = statusSel.value; load(); } },
      [['', 'any status'], ['ok', 'ok'], ['error', 'error'], ['running', 'running']].map(([v, t]) => el('option', { value: v, text: t })));
    statusSel.value = state.status;
    const rangeSel = el('select', { name: 'range', onchange: () => { state.range = rangeSel.value; load(); } },
      RANGES.map(([v, t]) => el('option', { value: v, text: t })));
    rangeSel.value = state.range;
    let timer = null;
    const input = (name, placeholder) => {
      const i = el('input', { name, placeholder, type: 'search', oninput: () => {
        state[name] = i.value; clearTimeout(timer); timer = setTimeout(load, 250);
      } });
      i.value = state[name];
      return i;
    };
    const body = el('tbody');
    const count = el('span', { class: 'muted' });
    main.replaceChildren(
      el('section', { class: 'filters' }, agentSel, statusSel, rangeSel,
        input('session', 'session'), input('user', 'user'), input('q', 'search inputs and outputs'), count),
      el('table', { class: 'runs' },
        el('thead', null, el('tr', null, ['Agent', 'Run', 'Start', 'Duration', 'Status', 'Spans', 'Tokens', 'Cost', 'Scores']
          .map((h) => el('th', { text: h })))),
        body));

    async function load() {
      const q = new URLSearchParams();
      for (const k of ['agent', 'session', 'user', 'status', 'q']) if (state[k]) q.set(k, state[k]);
      const shown = new URLSearchParams(q);
      if (state.range) {
        shown.set('range', state.range);
        q.set('since_ms', String(Date.now() - Number(state.range) * 1000));
      }
      history.replaceState(null, '', shown.toString() ? '/?' + shown : '/');
      const data = await getJSON('/api/runs?' + q);
      seq = data.seq;
      const current = agentSel.value || state.agent;
      agentSel.replaceChildren(el('option', { value: '', text: 'all agents' }), ...
        data.agents.map((a) => el('option', { value: a, text: a })));
      agentSel.value = current;
      count.textContent = data.runs.length + (data.runs.length === 1 ? ' run' : ' runs');
      body.replaceChildren(...data.runs.map(runRow));
      if (!data.runs.length) {
        body.appendChild(el('tr', null, el('td', { colspan: 9, class: 'muted empty' },
          'No runs yet. Send spans to the OTLP receiver or run an agent that writes .waxell/traces.')));
      }
    }
    refresh = load;
    return load();
  }

  function runRow(run) {
    const href = runHref(run.trace_id);
    const scores = Object.entries(run.scores || {}).map(([name, s]) =>
      el('span', { class: 'chip', title: s.comment || undefined }, name + ': ' + fmtScore(s)));
    const agents = run.agents && run.agents.length > 1 ? ' +' + (run.agents.length - 1) : '';
    return el('tr', { class: 'run', 'data-trace': run.trace_id },
      el('td', null, el('a', { href }, run.agent || run.service || '—'), el('span', { class: 'muted' }, agents)),
      el('td', null, el('a', { href, class: 'name' }, run.name), run.input ? el('div', { class: 'preview' }, run.input) : null),
      el('td', { class: 'nowrap' }, fmtTime(run.start)),
      el('td', { class: 'num' }, fmtDur(run.end - run.start)),
      el('td', null, el('span', { class: 'status ' + run.status }, run.status)),
      el('td', { class: 'num' }, fmtNum(run.spans)),
      el('td', { class: 'num' }, run.input_tokens || run.output_tokens ? fmtNum(run.input_tokens) + ' / ' + fmtNum(run.output_tokens) : ''),
      el('td', { class: 'num' }, fmtCost(run.cost)),
      el('td', null, scores));
  }

  // ---- run page ----------------------------------------------------------------------------------------

  function attr(span, key) { return span.attributes[key]; }
  function str(span, key) { const v = span.attributes[key]; return typeof v === 'string' ? v : undefined; }

  function classify(span) {
    const op = str(span, 'gen_ai.operation.name') || '';
    const kind = str(span, 'openinference.span.kind') || '';
    const keys = Object.keys(span.attributes);
    if (['chat', 'text_completion', 'generate_content', 'embeddings'].includes(op) || kind === 'LLM') return 'llm';
    if (op === 'decide' || 'waxell.decision.name' in span.attributes) return 'decision';
    if (op === 'reasoning' || keys.some((k) => k.startsWith('waxell.reasoning.'))) return 'reasoning';
    if (keys.some((k) => k === 'waxell.sandbox.code' || k === 'waxell.sandbox.code_preview')) return 'cell';
    if (op === 'invoke_agent' || kind === 'AGENT') return 'agent';
    if (keys.some((k) => k.startsWith('waxell.sandbox.'))) return 'sandbox';
    if (op === 'execute_tool' || kind === 'TOOL') return 'tool';
    if (op === 'retrieval' || kind === 'RETRIEVER') return 'retrieval';
    if (kind === 'CHAIN') return 'step';
    return 'span';
  }
  const BADGE = { llm: 'LLM', decision: 'DECISION', reasoning: 'REASONING', cell: 'CELL', agent: 'AGENT',
    sandbox: 'SANDBOX', tool: 'TOOL', retrieval: 'RETRIEVAL', step: 'STEP', span: 'SPAN' };

  function buildTree(spans) {
    const byId = new Map(spans.map((s) => [s.span_id, { span: s, children: [] }]));
    const roots = [];
    for (const node of byId.values()) {
      const parent = node.span.parent_id && byId.get(node.span.parent_id);
      if (parent) parent.children.push(node); else roots.push(node);
    }
    const order = (a, b) => a.span.start - b.span.start || a.span.end - b.span.end;
    const rows = [];
    const walk = (node, depth) => {
      rows.push({ span: node.span, depth, children: node.children.length });
      node.children.sort(order).forEach((c) => walk(c, depth + 1));
    };
    roots.sort(order).forEach((r) => walk(r, 0));
    return rows;
  }

  const FIRST_ROWS = 500;

  function runView(id) {
    watched = id;
    let showAll = false;
    let selected = decodeURIComponent(location.hash.replace(/^#span=/, '')) || '';
    let data = null;
    const header = el('section', { class: 'runhead' });
    // One click handler for every row: a large run draws thousands of them.
    const tree = el('div', { class: 'tree', role: 'tree', onclick: (e) => {
      const row = e.target instanceof Element ? e.target.closest('.row[data-span]') : null;
      if (row) select(row.getAttribute('data-span'));
    } });
    const detail = el('div', { class: 'detail' });
    main.replaceChildren(header, el('div', { class: 'runbody' }, el('div', { class: 'treepane' }, tree), detail));

    function select(spanId) {
      selected = spanId;
      history.replaceState(null, '', location.pathname + '#span=' + spanId);
      for (const r of tree.querySelectorAll('.row.selected')) r.classList.remove('selected');
      for (const r of tree.querySelectorAll('.row[data-span]')) {
        if (r.getAttribute('data-span') === spanId) { r.classList.add('selected'); break; }
      }
      const span = data.spans.find((s) => s.span_id === spanId);
      detail.replaceChildren(span ? spanDetail(span, data) : el('p', { class: 'muted' }, 'Select a span.'));
    }

    async function load() {
      try {
        data = await getJSON('/api/runs/' + encodeURIComponent(id));
      } catch (e) {
        seq = null;
        header.replaceChildren(el('p', { class: 'err' }, 'Run ' + id + ': ' + e.message));
        return;
      }
      seq = data.run.seq;
      for (const s of data.spans) {
        s.attributes = s.attributes || {};
        s.events = s.events || [];
        s.links = s.links || [];
      }
      document.title = (data.run.agent || data.run.name) + ' · waxell ui';
      header.replaceChildren(...runHeader(data.run).filter(Boolean));
      const rows = buildTree(data.spans);
      let t0 = Infinity, t1 = 0;
      for (const s of data.spans) { t0 = Math.min(t0, s.start); t1 = Math.max(t1, s.end); }
      const total = Math.max(t1 - t0, 1);
      // A very large run draws its first rows at once and the rest on request (or when a later span is
      // the one asked for), so its page opens fast.
      const wanted = rows.findIndex((r) => r.span.span_id === selected);
      if (wanted >= FIRST_ROWS) showAll = true;
      const shown = showAll ? rows : rows.slice(0, FIRST_ROWS);
      const more = rows.length - shown.length;
      tree.replaceChildren(el('div', { class: 'row head' }, el('span', { class: 'label' }, 'Span'),
        el('span', { class: 'dur' }, 'Duration'), el('span', { class: 'timeline' }, 'Timeline · ' + fmtDur(total))),
      ...(more > 0 ? [el('button', { class: 'more', type: 'button', onclick: () => { showAll = true; load(); } },
        'Show all ' + fmtNum(rows.length) + ' spans (' + fmtNum(more) + ' more below)')] : []),
      ...shown.map((r) => treeRow(r, t0, total)));
      const root = rows.length ? rows[0].span.span_id : '';
      select(data.spans.some((s) => s.span_id === selected) ? selected : root);
    }
    refresh = load;
    return load();
  }

  // A tree row, built directly (no helper per element): span values go in as text nodes only.
  function spanEl(cls, ...children) {
    const e = document.createElement('span');
    e.className = cls;
    e.append(...children);
    return e;
  }
  function treeRow(r, t0, total) {
    const kind = classify(r.span);
    const row = document.createElement('div');
    row.className = 'row k-' + kind + (r.span.status === 'error' ? ' error' : '');
    row.setAttribute('data-span', String(r.span.span_id));
    row.setAttribute('role', 'treeitem');
    row.tabIndex = 0;
    const label = spanEl('label', spanEl('badge b-' + kind, BADGE[kind]), ' ', spanEl('sname', String(r.span.name)));
    label.style.paddingLeft = (r.depth * 14 + 4) + 'px';
    const bar = spanEl('bar');
    bar.style.left = ((r.span.start - t0) / total) * 100 + '%';
    bar.style.width = Math.max(((r.span.end - r.span.start) / total) * 100, 0.3) + '%';
    row.append(label, spanEl('dur', fmtDur(r.span.end - r.span.start)), spanEl('timeline', bar));
    return row;
  }

  function runHeader(run) {
    const scores = Object.entries(run.scores || {});
    return [
      el('div', { class: 'crumbs' }, el('a', { href: '/' }, '← all runs')),
      el('h1', null, el('span', { class: 'status ' + run.status }, run.status), ' ', run.agent || run.name),
      el('dl', { class: 'facts' },
        fact('run', run.name), fact('trace', run.trace_id), fact('started', fmtTime(run.start)),
        fact('duration', fmtDur(run.end - run.start)), fact('spans', fmtNum(run.spans)),
        fact('errors', run.errors ? fmtNum(run.errors) : null),
        fact('agents', (run.agents || []).join(', ')),
        fact('tokens', run.input_tokens || run.output_tokens ? fmtNum(run.input_tokens) + ' in / ' + fmtNum(run.output_tokens) + ' out' : null),
        fact('cost', fmtCost(run.cost)), fact('session', run.session), fact('user', run.user), fact('service', run.service)),
      scores.length ? el('div', { class: 'scores' }, el('h2', null, 'Scores'), scoreList(scores)) : null,
    ];
  }

  function fact(name, value) {
    if (value === undefined || value === null || value === '') return null;
    return el('div', null, el('dt', null, name), el('dd', null, value));
  }

  function scoreList(entries) {
    return el('ul', { class: 'scorelist' }, entries.map(([name, s]) =>
      el('li', null, el('span', { class: 'sname' }, name), ' ', el('strong', null, fmtScore(s)),
        s.comment ? el('span', { class: 'comment' }, ' — ' + s.comment) : null)));
  }

  function section(title, ...children) {
    const body = children.filter((c) => c !== null && c !== undefined && c !== false && !(Array.isArray(c) && !c.length));
    if (!body.length) return null;
    return el('section', { class: 'card' }, el('h3', null, title), body);
  }
  function pre(v, cls) {
    const t = text(v);
    return t === '' ? null : el('pre', { class: cls || '' }, t);
  }
  function kv(pairs) {
    const rows = pairs.filter(([, v]) => v !== undefined && v !== null && v !== '');
    if (!rows.length) return null;
    return el('dl', { class: 'facts' }, rows.map(([k, v]) => fact(k, typeof v === 'string' ? v : text(v))));
  }

  function spanDetail(span, data) {
    const kind = classify(span);
    const head = el('div', { class: 'dhead' },
      el('h2', null, el('span', { class: 'badge b-' + kind }, BADGE[kind]), ' ', span.name),
      kv([['status', span.status + (span.status_message ? ': ' + span.status_message : '')],
        ['duration', fmtDur(span.end - span.start)], ['started', fmtTime(span.start)],
        ['kind', span.kind], ['span id', span.span_id], ['scope', span.scope]]));
    const views = { llm: llmView, cell: cellView, sandbox: cellView, decision: decisionView, reasoning: reasoningView,
      agent: agentView, tool: toolView, retrieval: toolView, step: ioView, span: ioView };
    return el('div', null, head, (views[kind] || ioView)(span, data), eventsView(span), attributesView(span));
  }

  // ---- LLM call as a chat ---------------------------------------------------------------------------------

  function partView(part) {
    if (part === null || typeof part !== 'object') return el('div', { class: 'part text' }, text(part));
    switch (part.type) {
      case 'text':
        return el('div', { class: 'part text' }, text(part.content));
      case 'reasoning':
        return el('div', { class: 'part reasoning' }, el('span', { class: 'tag' }, 'reasoning'), el('div', null, text(part.content)));
      case 'tool_call':
        return el('div', { class: 'part toolcall' }, el('span', { class: 'tag' }, 'tool call'), ' ',
          el('code', null, text(part.name)), part.id ? el('span', { class: 'muted' }, ' ' + part.id) : null,
          pre(part.arguments === undefined ? '' : pretty(part.arguments)));
      case 'tool_call_response':
        return el('div', { class: 'part toolresult' }, el('span', { class: 'tag' }, 'tool result'),
          part.id ? el('span', { class: 'muted' }, ' ' + part.id) : null, pre(pretty(part.response)));
      case 'blob': {
        const img = part.modality === 'image' || String(part.mime_type || '').startsWith('image/') ? image(part.mime_type, part.content, 'image') : null;
        return el('div', { class: 'part blob' }, img || el('span', { class: 'muted' }, '[' + (part.modality || 'blob') + ' ' + (part.mime_type || '') + ']'));
      }
      case 'uri':
      case 'file':
        return el('div', { class: 'part' }, el('span', { class: 'tag' }, part.type), ' ', text(part.uri || part.file_id || ''));
      default:
        return el('div', { class: 'part' }, pre(text(part)));
    }
  }

  // GenAI messages ({role, parts}) or OpenAI-style ones ({role, content, tool_calls}).
  function messageView(m) {
    if (m === null || typeof m !== 'object') return el('div', { class: 'msg' }, text(m));
    let parts = Array.isArray(m.parts) ? m.parts.map(partView) : [];
    if (!parts.length) {
      if (typeof m.content === 'string') parts.push(partView({ type: 'text', content: m.content }));
      else if (Array.isArray(m.content)) parts = m.content.map((c) => partView(c && c.type === 'text' && c.text !== undefined ? { type: 'text', content: c.text } : c));
      for (const tc of m.tool_calls || []) {
        const f = tc.function || tc;
        parts.push(partView({ type: 'tool_call', id: tc.id, name: f.name, arguments: f.arguments }));
      }
    }
    const role = String(m.role || 'message');
    return el('div', { class: 'msg role-' + role.replace(/[^a-z_]/gi, '') },
      el('div', { class: 'role' }, role, m.name ? ' · ' + m.name : '', m.finish_reason ? el('span', { class: 'muted' }, ' · ' + m.finish_reason) : null),
      parts);
  }

  // OpenInference's flattened llm.input_messages.N.message.* attributes as messages.
  function flattened(span, prefix) {
    const msgs = [];
    const re = new RegExp('^' + prefix.replace(/\./g, '\\.') + '\\.(\\d+)\\.message\\.(.+)$');
    for (const [k, v] of Object.entries(span.attributes)) {
      const m = re.exec(k);
      if (!m) continue;
      const i = Number(m[1]);
      const msg = (msgs[i] = msgs[i] || { role: '', content: '', tool_calls: [] });
      const field = m[2];
      if (field === 'role') msg.role = v;
      else if (field === 'content') msg.content = v;
      else {
        const t = /^tool_calls\.(\d+)\.tool_call\.function\.(name|arguments)$/.exec(field);
        if (t) {
          const tc = (msg.tool_calls[Number(t[1])] = msg.tool_calls[Number(t[1])] || { function: {} });
          tc.function[t[2]] = v;
        }
      }
    }
    return msgs.filter(Boolean).map((m) => ({ ...m, tool_calls: m.tool_calls.filter(Boolean) }));
  }

  function messages(span, genai, oi) {
    const parsed = parseJSON(attr(span, genai));
    if (Array.isArray(parsed)) return parsed;
    return flattened(span, oi);
  }

  function llmView(span) {
    const a = span.attributes;
    const model = a['gen_ai.response.model'] || a['gen_ai.request.model'] || a['llm.model_name'];
    const ttfc = a['gen_ai.response.time_to_first_chunk'];
    const cost = a['waxell.llm.cost'] !== undefined ? a['waxell.llm.cost'] : a['llm.cost.total'];
    const inTok = a['gen_ai.usage.input_tokens'] !== undefined ? a['gen_ai.usage.input_tokens'] : a['llm.token_count.prompt'];
    const outTok = a['gen_ai.usage.output_tokens'] !== undefined ? a['gen_ai.usage.output_tokens'] : a['llm.token_count.completion'];
    const system = parseJSON(a['gen_ai.system_instructions']);
    const input = messages(span, 'gen_ai.input.messages', 'llm.input_messages');
    const output = messages(span, 'gen_ai.output.messages', 'llm.output_messages');
    const tools = parseJSON(a['gen_ai.tool.definitions']);
    return el('div', { class: 'llm' },
      kv([['model', model], ['provider', a['gen_ai.provider.name'] || a['llm.system']],
        ['tokens', inTok !== undefined || outTok !== undefined ? fmtNum(inTok) + ' in / ' + fmtNum(outTok) + ' out' : ''],
        ['cached input tokens', a['gen_ai.usage.cache_read.input_tokens']],
        ['reasoning tokens', a['gen_ai.usage.reasoning.output_tokens']],
        ['cost', cost !== undefined ? fmtCost(cost) : ''],
        ['time to first chunk', typeof ttfc === 'number' ? fmtDur(ttfc * 1e9) : ttfc],
        ['streamed', a['gen_ai.request.stream'] === undefined ? '' : String(a['gen_ai.request.stream'])],
        ['chunks', a['waxell.llm.chunk_count']],
        ['finish reasons', Array.isArray(a['gen_ai.response.finish_reasons']) ? a['gen_ai.response.finish_reasons'].join(', ') : a['gen_ai.response.finish_reasons']],
        ['temperature', a['gen_ai.request.temperature']], ['max tokens', a['gen_ai.request.max_tokens']],
        ['server', a['server.address'] ? a['server.address'] + (a['server.port'] ? ':' + a['server.port'] : '') : ''],
        ['response id', a['gen_ai.response.id']]]),
      section('Chat',
        Array.isArray(system) && system.length ? el('div', { class: 'msg role-system' }, el('div', { class: 'role' }, 'system instructions'), system.map(partView)) : null,
        input.map(messageView),
        output.length ? el('div', { class: 'divider' }, 'response') : null,
        output.map(messageView)),
      Array.isArray(tools) && tools.length ? section('Tools offered', el('ul', null, tools.map((t) =>
        el('li', null, el('code', null, text(t.name || (t.function && t.function.name) || t.type)),
          t.description || (t.function && t.function.description) ? ' — ' + (t.description || t.function.description) : '')))) : null);
  }

  // ---- sandbox cell --------------------------------------------------------------------------------------

  function cellView(span) {
    const a = span.attributes;
    const args = parseJSON(a['gen_ai.tool.call.arguments']) || {};
    const result = parseJSON(a['gen_ai.tool.call.result']);
    const code = a['waxell.sandbox.code'] || a['waxell.sandbox.code_preview'] || (typeof args.code === 'string' ? args.code : '');
    const r = result && typeof result === 'object' && !Array.isArray(result) ? result : {};
    const logs = r.logs || {};
    const join = (v) => Array.isArray(v) ? v.join('') : v;
    const stdout = a['waxell.sandbox.stdout'] !== undefined ? a['waxell.sandbox.stdout'] : join(logs.stdout !== undefined ? logs.stdout : r.stdout);
    const stderr = a['waxell.sandbox.stderr'] !== undefined ? a['waxell.sandbox.stderr'] : join(logs.stderr !== undefined ? logs.stderr : r.stderr);
    const err = r.error && typeof r.error === 'object' ? r.error : {};
    const errName = a['waxell.sandbox.error.name'] || err.name;
    const errValue = a['waxell.sandbox.error.value'] || err.value;
    const traceback = a['waxell.sandbox.error.traceback'] || err.traceback;
    const pictures = [];
    for (const [k, v] of Object.entries(a)) {
      const m = /\.(png|jpeg|jpg|gif|webp)$/.exec(k);
      if (m && typeof v === 'string') { const img = image(m[1], v, k); if (img) pictures.push(img); }
      else if (typeof v === 'string' && k.startsWith('waxell.sandbox.')) imagesIn(parseJSON(v), pictures);
    }
    imagesIn(result, pictures);
    return el('div', { class: 'cell' },
      kv([['backend', a['waxell.sandbox.backend']], ['language', a['waxell.sandbox.language']],
        ['execution', a['waxell.sandbox.execution_count']], ['sandbox', a['waxell.sandbox.id']],
        ['results', Array.isArray(a['waxell.sandbox.result_types']) ? a['waxell.sandbox.result_types'].join(', ') : a['waxell.sandbox.result_types']],
        ['file', a['waxell.sandbox.file.path']], ['size', a['waxell.sandbox.file.size']]]),
      section('Code', pre(code, 'code')),
      errName || errValue || traceback ? section('Error', el('p', { class: 'err' }, text(errName) + (errValue ? ': ' + text(errValue) : '')), pre(traceback, 'traceback')) : null,
      section('Charts and images', pictures),
      section('stdout', pre(stdout, 'stdout')),
      section('stderr', pre(stderr, 'stderr')),
      section('Output', pre(a['waxell.sandbox.output_preview'] || (result === undefined ? a['output.value'] : ''))));
  }

  // ---- decision, reasoning, agent, tool, generic ---------------------------------------------------------------

  function decisionView(span) {
    const a = span.attributes;
    const options = Array.isArray(a['waxell.decision.options']) ? a['waxell.decision.options'] : [];
    const chosen = a['waxell.decision.chosen'];
    return el('div', { class: 'decision' },
      kv([['decision', a['waxell.decision.name']], ['chosen', chosen], ['confidence', a['waxell.decision.confidence']],
        ['invalid choice', a['waxell.decision.invalid_choice'] ? 'yes: not one of the options' : '']]),
      section('Options', el('ul', { class: 'options' }, options.map((o) =>
        el('li', { class: String(o) === String(chosen) ? 'chosen' : '' }, String(o) === String(chosen) ? '✔ ' : '', text(o))))),
      section('Reasoning', pre(a['waxell.decision.reasoning'])),
      ioView(span));
  }

  function reasoningView(span) {
    const a = span.attributes;
    const evidence = Array.isArray(a['waxell.reasoning.evidence']) ? a['waxell.reasoning.evidence'] : [];
    return el('div', { class: 'reasoning' },
      kv([['step', a['waxell.reasoning.step']]]),
      section('Thought', pre(a['waxell.reasoning.thought'])),
      section('Evidence', evidence.length ? el('ul', null, evidence.map((e) => el('li', null, text(e)))) : null),
      section('Conclusion', pre(a['waxell.reasoning.conclusion'])));
  }

  function agentView(span) {
    const a = span.attributes;
    const tags = Object.entries(a).filter(([k]) => k.startsWith('waxell.tag.')).map(([k, v]) => [k.slice(11), text(v)]);
    const meta = Object.entries(a).filter(([k]) => k.startsWith('waxell.meta.')).map(([k, v]) => [k.slice(12), text(v)]);
    const scores = span.events.filter((e) => e.name === 'gen_ai.evaluation.result').map((e) => [
      e.attributes['gen_ai.evaluation.name'], { value: e.attributes['gen_ai.evaluation.score.value'],
        label: e.attributes['gen_ai.evaluation.score.label'], comment: e.attributes['gen_ai.evaluation.explanation'] }]);
    return el('div', { class: 'agent' },
      kv([['agent', a['gen_ai.agent.name'] || a['agent.name']], ['description', a['gen_ai.agent.description']],
        ['session', a['gen_ai.conversation.id'] || a['session.id']], ['user', a['user.id']]]),
      scores.length ? section('Scores', scoreList(scores)) : null,
      tags.length ? section('Tags', kv(tags)) : null,
      meta.length ? section('Metadata', kv(meta)) : null,
      ioView(span));
  }

  function toolView(span) {
    const a = span.attributes;
    const args = a['gen_ai.tool.call.arguments'] !== undefined ? a['gen_ai.tool.call.arguments'] : a['input.value'];
    const result = a['gen_ai.tool.call.result'] !== undefined ? a['gen_ai.tool.call.result'] : a['output.value'];
    const pictures = imagesIn(parseJSON(result));
    return el('div', { class: 'tool' },
      kv([['tool', a['gen_ai.tool.name'] || a['tool.name']], ['type', a['waxell.tool.type'] || a['gen_ai.tool.type']],
        ['description', a['gen_ai.tool.description'] || a['tool.description']], ['call id', a['gen_ai.tool.call.id']],
        ['source', a['gen_ai.data_source.id']], ['query', a['waxell.retrieval.query']], ['results', a['waxell.retrieval.result_count']]]),
      section('Arguments', pre(args === undefined ? '' : pretty(args))),
      section('Result', pre(result === undefined ? '' : pretty(result))),
      section('Charts and images', pictures));
  }

  function ioView(span) {
    const a = span.attributes;
    return el('div', null,
      section('Input', pre(a['input.value'] === undefined ? '' : pretty(a['input.value']))),
      section('Output', pre(a['output.value'] === undefined ? '' : pretty(a['output.value']))));
  }

  function eventsView(span) {
    const events = span.events.filter((e) => e.name !== 'gen_ai.evaluation.result');
    return section('Events', events.map((e) => {
      if (e.name === 'exception') {
        return el('div', { class: 'event exception' },
          el('p', { class: 'err' }, text(e.attributes['exception.type']) + ': ' + text(e.attributes['exception.message'])),
          pre(e.attributes['exception.stacktrace'], 'traceback'));
      }
      return el('div', { class: 'event' }, el('strong', null, e.name), ' ', el('span', { class: 'muted' }, fmtTime(e.time)),
        kv(Object.entries(e.attributes).map(([k, v]) => [k, text(v)])));
    }));
  }

  function attributesView(span) {
    const entries = Object.entries(span.attributes).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0));
    const d = el('details', { class: 'card attrs' }, el('summary', null, 'All attributes (' + entries.length + ')'),
      el('table', null, el('tbody', null, entries.map(([k, v]) => {
        const t = text(v);
        return el('tr', null, el('th', null, k), el('td', null, t.length > 200 || t.includes('\n') ? el('pre', null, t.length > 20000 ? t.slice(0, 20000) + '…' : t) : t));
      }))));
    return d;
  }

  // ---- routing ---------------------------------------------------------------------------------------

  const m = /^\/runs\/([0-9a-fA-F]{32})\/?$/.exec(location.pathname);
  const start = m ? runView(m[1].toLowerCase()) : listView();
  Promise.resolve(start).catch((e) => main.replaceChildren(el('p', { class: 'err' }, String(e.message || e)))).then(poll);
})();
