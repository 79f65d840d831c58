// The memory console: plain DOM code over the gateway's /api/v2 routes. Memory content
// is user data, so it only ever reaches the page as text (textContent, text nodes).
'use strict';

(() => {
  const API = '/api/v2';
  const KEY_STORE = 'memmachine.console.key';
  const EPISODE_PAGE = 20;
  const FEATURE_PAGE = 50;
  const PROJECT_PAGE = 50;
  const MODES = ['lexical', 'dense', 'hybrid'];

  const state = {
    // sessionStorage only: the key ends with the tab, never in localStorage or cookies.
    key: sessionStorage.getItem(KEY_STORE) || '',
    authChecked: false,
    needsKey: false,
    loginMessage: '',
    config: null,
    project: null, // {org, id, data} of the project view last shown
    lastView: '',
  };
  let generation = 0;

  // --- HTTP ----------------------------------------------------------------------------

  class ApiError extends Error {
    constructor(status, detail) {
      super((detail && detail.message) || (status ? `HTTP ${status}` : 'request failed'));
      this.status = status;
      this.violations = Array.isArray(detail && detail.field_violations) ? detail.field_violations : [];
      this.exception = (detail && detail.exception) || '';
    }
  }

  async function api(path, body, key = state.key) {
    const headers = { Accept: 'application/json' };
    const init = { method: body === undefined ? 'GET' : 'POST', headers, cache: 'no-store', credentials: 'omit' };
    if (body !== undefined) {
      headers['Content-Type'] = 'application/json';
      init.body = JSON.stringify(body);
    }
    if (key) headers.Authorization = `Bearer ${key}`;
    let response;
    try {
      response = await fetch(API + path, init);
    } catch (e) {
      throw new ApiError(0, { message: `The server could not be reached (${e.message}).` });
    }
    const text = await response.text();
    let data = null;
    if (text) {
      try {
        data = JSON.parse(text);
      } catch (_) {
        data = null;
      }
    }
    if (!response.ok) {
      const detail = data && data.detail && typeof data.detail === 'object' ? data.detail : { message: text.slice(0, 300) || response.statusText };
      const error = new ApiError(response.status, detail);
      if (response.status === 401 && key && key === state.key) signedOut(error.message);
      throw error;
    }
    // A change may shift where pages start.
    if (!/\/(list|get|search|usage)$/.test(path)) pageStarts.clear();
    return data;
  }

  /** A 401 mid-session: the key was revoked or expired, so ask for one again. */
  function signedOut(message) {
    forgetKey();
    state.needsKey = true;
    state.loginMessage = `The server refused the key: ${message}`;
    queueMicrotask(render);
  }

  function forgetKey() {
    state.key = '';
    sessionStorage.removeItem(KEY_STORE);
    state.config = null;
    state.project = null;
  }

  const ref = (org, project) => ({ org_id: org, project_id: project });

  // --- DOM helpers ---------------------------------------------------------------------

  const $ = (selector, root = document) => root.querySelector(selector);

  /** An element; string children become text nodes (never markup). */
  function h(tag, props, ...children) {
    const el = document.createElement(tag);
    for (const [k, v] of Object.entries(props || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === 'class') el.className = v;
      else if (k === 'text') el.textContent = v;
      else if (k === 'value') el.value = v;
      else if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
      else el.setAttribute(k, v === true ? '' : String(v));
    }
    for (const child of children.flat(Infinity)) {
      if (child === null || child === undefined || child === false) continue;
      el.append(child instanceof Node ? child : String(child));
    }
    return el;
  }

  const loading = (what = 'Loading…') => h('p', { class: 'loading', role: 'status' }, what);
  const empty = (text) => h('p', { class: 'empty' }, text);

  function field(label, input, hint, wide) {
    const id = input.id || `f-${Math.random().toString(36).slice(2, 9)}`;
    input.id = id;
    const hintEl = hint ? h('span', { class: 'hint', id: `${id}-hint` }, hint) : null;
    if (hintEl) input.setAttribute('aria-describedby', hintEl.id);
    return h('div', { class: wide ? 'field wide' : 'field' }, h('label', { for: id }, label), input, hintEl);
  }

  /** An error box: the message, and each rejected field for a 422. */
  function errorBox(error, prefix) {
    const box = h('div', { class: 'error', role: 'alert' });
    const status = error.status ? ` (${error.status}${error.exception ? ` ${error.exception}` : ''})` : '';
    box.append(h('p', null, prefix ? `${prefix}: ` : '', error.message, status));
    const fields = error.violations.filter((v) => v.description && v.description !== error.message);
    if (fields.length) {
      box.append(h('ul', null, fields.map((v) => h('li', null, h('code', null, v.field || '(body)'), `: ${v.description}`))));
    }
    return box;
  }

  function showIn(container, ...nodes) {
    container.replaceChildren(...nodes.filter((n) => n !== null && n !== undefined));
  }

  let noticeTimer = 0;
  let noticeMoves = false;
  /** A short message; `moving` when it announces the view about to open. */
  function notice(text, moving = false) {
    noticeMoves = moving;
    const el = $('#notice');
    el.textContent = text;
    el.classList.toggle('shown', Boolean(text));
    clearTimeout(noticeTimer);
    if (text) noticeTimer = setTimeout(() => notice(''), 6000);
  }

  function time(iso) {
    if (!iso) return null;
    const d = new Date(iso);
    const shown = Number.isNaN(d.getTime()) ? iso : d.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'short' });
    return h('time', { datetime: iso, title: iso }, shown);
  }

  const plural = (n, one, many = `${one}s`) => `${n} ${n === 1 ? one : many}`;

  /** Asks with the page's <dialog>; resolves true when confirmed. */
  function confirmAction(title, text, okLabel = 'Delete') {
    const dialog = $('#confirm-dialog');
    const ok = $('#confirm-ok');
    const cancel = $('#confirm-cancel');
    const opener = document.activeElement;
    $('#confirm-title').textContent = title;
    $('#confirm-text').textContent = text;
    ok.textContent = okLabel;
    return new Promise((resolve) => {
      const done = (answer) => {
        ok.onclick = cancel.onclick = dialog.oncancel = null;
        if (dialog.open) dialog.close();
        if (opener && opener.isConnected) opener.focus();
        resolve(answer);
      };
      ok.onclick = () => done(true);
      cancel.onclick = () => done(false);
      dialog.oncancel = (e) => {
        e.preventDefault();
        done(false);
      };
      dialog.showModal();
      cancel.focus();
    });
  }

  /** Runs `work` with `button` disabled and relabelled meanwhile. */
  async function busy(button, label, work) {
    const before = button.textContent;
    button.disabled = true;
    button.textContent = label;
    try {
      return await work();
    } finally {
      if (button.isConnected) {
        button.disabled = false;
        button.textContent = before;
      }
    }
  }

  // --- routing -------------------------------------------------------------------------

  function parseRoute() {
    const raw = location.hash.replace(/^#/, '') || '/';
    const q = raw.indexOf('?');
    const path = q < 0 ? raw : raw.slice(0, q);
    const params = new URLSearchParams(q < 0 ? '' : raw.slice(q + 1));
    let parts;
    try {
      parts = path.split('/').filter(Boolean).map(decodeURIComponent);
    } catch (_) {
      return { view: 'bad', params };
    }
    if (parts[0] === 'p' && parts.length >= 3 && parts.length <= 4) {
      const tab = parts[3] || 'episodes';
      if (!['episodes', 'search', 'semantic'].includes(tab)) return { view: 'bad', params };
      return { view: 'project', org: parts[1], project: parts[2], tab, params };
    }
    if (parts.length === 0) return { view: 'projects', params };
    return { view: 'bad', params };
  }

  function link(org, project, tab, params = {}) {
    let out = `#/p/${encodeURIComponent(org)}/${encodeURIComponent(project)}/${tab}`;
    const query = new URLSearchParams();
    for (const [k, v] of Object.entries(params)) {
      if (v !== undefined && v !== null && v !== '' && !(k === 'page' && Number(v) === 0)) query.set(k, v);
    }
    const s = query.toString();
    return s ? `${out}?${s}` : out;
  }

  function go(hash) {
    if (location.hash === hash) render();
    else location.hash = hash;
  }

  // Where each page starts, learnt from the page before: its token reads it in one step
  // (a page number alone walks every page before it), and pages cut short by the
  // server's byte budget still number their episodes right.
  const pageStarts = new Map();

  /** One page of a listing: {items, next, first} (first: the 1-based number of its first item). */
  async function listPage(org, project, type, pageSize, page, filterText) {
    const scope = JSON.stringify([type, org, project, filterText]);
    const known = pageStarts.get(`${scope}#${page}`);
    const answer = await api('/memories/list', {
      ...ref(org, project), type, page_size: pageSize, filter: filterText,
      ...(known ? { page_token: known.token, page_num: 0 } : { page_token: '', page_num: page }),
    });
    const content = answer.content || {};
    const items = (type === 'semantic' ? content.semantic_memory : content.episodic_memory) || [];
    const next = content.next_page_token || '';
    const first = known ? known.first : page * pageSize + 1;
    if (next) pageStarts.set(`${scope}#${page + 1}`, { token: next, first: first + items.length });
    return { items, next, first };
  }

  function pageParam(params) {
    const n = Number.parseInt(params.get('page') || '0', 10);
    return Number.isFinite(n) && n >= 0 ? n : 0;
  }

  function crumbs(items) {
    const nav = $('#crumbs');
    nav.replaceChildren(
      h('ol', null, items.map((item, i) => h('li', null, i === items.length - 1 || !item.href
        ? h('span', { 'aria-current': i === items.length - 1 ? 'page' : null }, item.label)
        : h('a', { href: item.href }, item.label)))),
    );
  }

  // --- the page ------------------------------------------------------------------------

  async function render() {
    const gen = ++generation;
    const main = $('#main');
    $('#sign-out').hidden = !state.key;
    if (!state.authChecked) {
      showIn(main, loading('Connecting…'));
      const ok = await checkAuth();
      if (gen !== generation) return;
      if (!ok) return;
    }
    if (state.needsKey && !state.key) return renderLogin(main);
    $('#sign-out').hidden = !state.key;
    const route = parseRoute();
    const viewName = route.view === 'project' ? `project:${route.org}/${route.project}/${route.tab}` : route.view;
    const moved = viewName !== state.lastView;
    state.lastView = viewName;
    if (route.view === 'projects') await renderProjects(main, route, gen);
    else if (route.view === 'project') await renderProject(main, route, gen);
    else {
      crumbs([{ label: 'Projects', href: '#/' }, { label: 'Not found' }]);
      showIn(main, h('h1', { tabindex: '-1' }, 'Not found'), h('p', null, 'This link names no view of the console. ', h('a', { href: '#/' }, 'Go to the projects.')));
    }
    if (moved && gen === generation) {
      const target = $('[data-autofocus]', main) || $('h1', main);
      if (target) target.focus({ preventScroll: true });
    }
  }

  /** Whether this server wants a key: a list without one (or with the stored one) says. */
  async function checkAuth() {
    try {
      await api('/projects/list', {});
      state.authChecked = true;
      state.needsKey = Boolean(state.key);
      return true;
    } catch (error) {
      if (error.status === 401) {
        state.authChecked = true;
        state.needsKey = true;
        return true;
      }
      const main = $('#main');
      crumbs([]);
      showIn(main, h('h1', { tabindex: '-1' }, 'memmachine console'), errorBox(error, 'The server did not answer'),
        h('p', null, h('button', { type: 'button', onclick: () => render() }, 'Try again')));
      return false;
    }
  }

  async function loadConfig() {
    if (state.config) return state.config;
    try {
      state.config = await api('/config');
    } catch (_) {
      state.config = {};
    }
    return state.config;
  }

  // --- login ---------------------------------------------------------------------------

  function renderLogin(main) {
    crumbs([{ label: 'Sign in' }]);
    const input = h('input', { type: 'password', name: 'key', autocomplete: 'off', spellcheck: 'false', required: true });
    const errorArea = h('div', { class: 'form-error', 'aria-live': 'assertive' });
    if (state.loginMessage) errorArea.append(h('p', { class: 'error', role: 'alert' }, state.loginMessage));
    const submit = h('button', { type: 'submit', class: 'primary' }, 'Sign in');
    const form = h('form', { class: 'card login', novalidate: true },
      field('API key', input, 'Made with memmachine keys create. Kept in this tab only (sessionStorage) and sent as Authorization: Bearer.'),
      h('div', { class: 'actions' }, submit),
      errorArea);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      const key = input.value.trim();
      if (!key) {
        showIn(errorArea, h('p', { class: 'error', role: 'alert' }, 'Enter an API key.'));
        input.focus();
        return;
      }
      await busy(submit, 'Signing in…', async () => {
        try {
          await api('/projects/list', {}, key);
        } catch (error) {
          const text = error.status === 401
            ? `The server refused this key: ${error.message}`
            : `Could not sign in: ${error.message}`;
          showIn(errorArea, h('p', { class: 'error', role: 'alert' }, text));
          input.select();
          return;
        }
        state.key = key;
        sessionStorage.setItem(KEY_STORE, key);
        state.loginMessage = '';
        state.config = null;
        state.lastView = '';
        notice('Signed in.');
        render();
      });
    });
    showIn(main,
      h('h1', { tabindex: '-1' }, 'Sign in'),
      h('p', { class: 'lead' }, 'This server requires an API key (it runs with --auth).'),
      form);
    input.focus();
  }

  $('#sign-out').addEventListener('click', () => {
    forgetKey();
    state.needsKey = true;
    state.loginMessage = '';
    state.lastView = '';
    notice('Signed out. The key was removed from this tab.', true);
    if (location.hash && location.hash !== '#/') location.hash = '#/';
    else render();
  });

  // --- projects ------------------------------------------------------------------------

  async function renderProjects(main, route, gen) {
    crumbs([{ label: 'Projects' }]);
    const listArea = h('div', { class: 'project-area' }, loading('Loading projects…'));
    const createArea = h('section', { class: 'card', 'aria-labelledby': 'create-title' });
    showIn(main,
      h('div', { class: 'page-head' }, h('h1', { tabindex: '-1' }, 'Projects'), h('p', { class: 'lead' }, `Every project ${state.key ? 'this key reaches' : 'on this server'}, with its episode count.`)),
      listArea, createArea);
    let projects;
    try {
      projects = await api('/projects/list', {});
    } catch (error) {
      if (gen === generation) showIn(listArea, errorBox(error, 'Could not list the projects'));
      projects = null;
    }
    if (gen !== generation) return;
    const orgs = projects ? [...new Set(projects.map((p) => p.org_id))] : [];
    renderCreate(createArea, orgs.length === 1 ? orgs[0] : '');
    if (!projects) return;
    if (projects.length === 0) {
      showIn(listArea, empty('No projects yet. Create one below.'));
      return;
    }
    projects.sort((a, b) => a.org_id.localeCompare(b.org_id) || a.project_id.localeCompare(b.project_id));
    const pages = Math.ceil(projects.length / PROJECT_PAGE);
    const page = Math.min(pageParam(route.params), pages - 1);
    const shown = projects.slice(page * PROJECT_PAGE, (page + 1) * PROJECT_PAGE);
    const list = h('ul', { class: 'project-list', 'aria-label': 'Projects' });
    const counts = [];
    for (const p of shown) {
      const count = h('span', { class: 'count' }, 'counting…');
      counts.push([p, count]);
      let del = null;
      if (deletable(p.org_id, p.project_id)) {
        del = h('button', { type: 'button', class: 'danger quiet', 'aria-label': `Delete project ${p.org_id}/${p.project_id}` }, 'Delete');
        del.addEventListener('click', () => deleteProject(p.org_id, p.project_id, del));
      }
      list.append(h('li', { class: 'card project', 'data-project': `${p.org_id}/${p.project_id}` },
        h('a', { href: link(p.org_id, p.project_id, 'episodes'), class: 'project-name' },
          h('span', { class: 'org' }, p.org_id, ' / '), h('span', { class: 'pid' }, p.project_id)),
        count, h('div', { class: 'actions' }, del)));
    }
    const nodes = [h('p', { class: 'summary' }, plural(projects.length, 'project')), list];
    if (pages > 1) {
      nodes.push(pager(page, page < pages - 1, (n) => `#/?page=${n}`, `of ${pages}`));
    }
    showIn(listArea, ...nodes);
    // A few counts at a time: a large org should not fire hundreds of calls at once.
    let next = 0;
    const worker = async () => {
      while (next < counts.length && gen === generation) {
        const [p, el] = counts[next++];
        try {
          const { count } = await api('/projects/episode_count/get', ref(p.org_id, p.project_id));
          el.textContent = plural(count, 'episode');
        } catch (error) {
          el.textContent = `count unavailable: ${error.message}`;
        }
      }
    };
    await Promise.all([worker(), worker(), worker(), worker()]);
  }

  function renderCreate(section, org) {
    const orgInput = h('input', { name: 'org', value: org, autocomplete: 'off', spellcheck: 'false', pattern: '[A-Za-z0-9_:\\-]{0,128}' });
    const idInput = h('input', { name: 'project', autocomplete: 'off', spellcheck: 'false', required: true, pattern: '[A-Za-z0-9_:\\-]{1,128}' });
    const description = h('input', { name: 'description', autocomplete: 'off' });
    const mode = h('select', { name: 'reranker' },
      h('option', { value: '' }, 'server default'),
      MODES.map((m) => h('option', { value: m }, m)));
    const errorArea = h('div', { class: 'form-error', 'aria-live': 'assertive' });
    const submit = h('button', { type: 'submit', class: 'primary' }, 'Create project');
    const form = h('form', { class: 'grid-form', novalidate: true },
      field('Org', orgInput, 'Empty means universal.'),
      field('Project id', idInput, 'Letters, digits, _ : and -'),
      field('Description', description),
      field('Ranking mode', mode),
      h('div', { class: 'actions' }, submit),
      errorArea);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      errorArea.replaceChildren();
      const body = {
        org_id: orgInput.value.trim(),
        project_id: idInput.value.trim(),
        description: description.value,
        config: { reranker: mode.value },
      };
      if (!body.project_id) {
        showIn(errorArea, h('p', { class: 'error', role: 'alert' }, 'Enter a project id.'));
        idInput.focus();
        return;
      }
      await busy(submit, 'Creating…', async () => {
        try {
          const created = await api('/projects', body);
          notice(`Project ${created.org_id}/${created.project_id} created.`, true);
          go(link(created.org_id, created.project_id, 'episodes'));
        } catch (error) {
          showIn(errorArea, errorBox(error, 'Could not create the project'));
        }
      });
    });
    showIn(section, h('h2', { id: 'create-title' }, 'Create a project'), form);
  }

  /** The server always refuses to delete universal/universal (412): offer no button. */
  function deletable(org, project) {
    return !((org || 'universal') === 'universal' && (project || 'universal') === 'universal');
  }

  async function deleteProject(org, project, button) {
    const yes = await confirmAction(`Delete project ${org}/${project}?`,
      'The project and every memory in it (episodes, features, summaries) are deleted for good.', 'Delete project');
    if (!yes) return;
    await busy(button, 'Deleting…', async () => {
      try {
        await api('/projects/delete', ref(org, project));
        notice(`Project ${org}/${project} deleted.`, true);
        state.project = null;
        go('#/');
      } catch (error) {
        notice(`Could not delete ${org}/${project}: ${error.message}`);
      }
    });
  }

  // --- one project ---------------------------------------------------------------------

  async function renderProject(main, route, gen) {
    const { org, project, tab } = route;
    crumbs([{ label: 'Projects', href: '#/' }, { label: `${org} / ${project}` }]);
    const same = state.project && state.project.org === org && state.project.id === project;
    if (!same) showIn(main, loading(`Opening ${org}/${project}…`));
    let data;
    try {
      data = same ? state.project.data : await api('/projects/get', ref(org, project));
    } catch (error) {
      if (gen !== generation) return;
      state.project = null;
      const what = error.status === 403 ? 'Access refused' : error.status === 404 ? 'No such project' : 'Could not open the project';
      showIn(main, h('h1', { tabindex: '-1' }, `${org} / ${project}`), errorBox(error, what),
        h('p', null, h('a', { href: '#/' }, 'Back to the projects')));
      return;
    }
    if (gen !== generation) return;
    state.project = { org, id: project, data };
    const config = await loadConfig();
    if (gen !== generation) return;
    const count = h('span', { id: 'episode-count', class: 'count' }, 'counting…');
    let del = null;
    if (deletable(org, project)) {
      del = h('button', { type: 'button', class: 'danger quiet' }, 'Delete project');
      del.addEventListener('click', () => deleteProject(org, project, del));
    }
    const tabs = h('nav', { class: 'tabs', 'aria-label': 'Project views' },
      [['episodes', 'Episodes'], ['search', 'Search'], ['semantic', 'Semantic memory']].map(([name, label]) =>
        h('a', { href: link(org, project, name), 'aria-current': name === tab ? 'page' : null }, label)));
    const body = h('section', { class: 'tab-body', 'aria-label': tab });
    showIn(main,
      h('div', { class: 'page-head project-head' },
        h('div', null,
          h('h1', { tabindex: '-1' }, h('span', { class: 'org' }, `${org} / `), project),
          h('p', { class: 'lead' }, count, ' · ranking: ', h('span', { id: 'ranking-mode' }, rankingMode(data, config)),
            data.description ? ` · ${data.description}` : '')),
        del),
      tabs, body);
    refreshCount(org, project);
    renderUsage(main, org, gen);
    if (tab === 'episodes') await renderEpisodes(body, route, gen);
    else if (tab === 'search') await renderSearch(body, route, gen);
    else await renderSemantic(body, route, gen);
  }

  /** The project's ranking mode; empty means the server's default, which depends on
   * whether the project has an embedder. */
  function rankingMode(project, config) {
    const named = (project.config && project.config.reranker) || '';
    if (named) return MODES.includes(named) ? named : `${named} (reranker)`;
    const own = (project.config && project.config.embedder) || '';
    const longTerm = (config && config.episodic_memory && config.episodic_memory.long_term_memory) || null;
    if (!longTerm) return 'server default';
    // A project of the server's embedder ranks as GET /config says the server does.
    if (!own && longTerm.reranker) return `${longTerm.reranker} (server default)`;
    const embedder = own === 'none' ? null : own || longTerm.embedder;
    return `${embedder ? 'hybrid' : 'lexical'} (server default)`;
  }

  async function refreshCount(org, project) {
    const el = $('#episode-count');
    try {
      const { count } = await api('/projects/episode_count/get', ref(org, project));
      if (el && el.isConnected) {
        el.textContent = plural(count, 'episode');
        el.dataset.count = String(count);
      }
    } catch (error) {
      if (el && el.isConnected) el.textContent = `count unavailable (${error.message})`;
    }
  }

  function pager(page, hasNext, hrefOf, total = '') {
    return h('nav', { class: 'pager', 'aria-label': 'Pages' },
      page > 0 ? h('a', { href: hrefOf(page - 1), class: 'button', rel: 'prev' }, '← Previous') : h('span', { class: 'button disabled', 'aria-hidden': 'true' }, '← Previous'),
      h('span', { class: 'page-no' }, `Page ${page + 1}${total ? ` ${total}` : ''}`),
      hasNext ? h('a', { href: hrefOf(page + 1), class: 'button', rel: 'next' }, 'Next →') : h('span', { class: 'button disabled', 'aria-hidden': 'true' }, 'Next →'));
  }

  /** A filter box; a bad filter's error goes right under it. */
  function filterForm(id, value, onApply, placeholder) {
    const input = h('input', { id, type: 'text', value, spellcheck: 'false', autocomplete: 'off', placeholder });
    const errorArea = h('div', { class: 'field-error', id: `${id}-error`, 'aria-live': 'assertive' });
    input.setAttribute('aria-describedby', errorArea.id);
    const clear = h('button', { type: 'button', class: 'quiet' }, 'Clear');
    const form = h('form', { class: 'filter-form', role: 'search', novalidate: true },
      h('label', { for: id }, 'Filter'),
      h('div', { class: 'inline' }, input, h('button', { type: 'submit' }, 'Apply'), clear),
      errorArea);
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      onApply(input.value.trim());
    });
    clear.addEventListener('click', () => {
      input.value = '';
      onApply('');
    });
    return { form, input, errorArea };
  }

  /** Shows a 422 about the filter under the filter box; true when it did. */
  function filterError(error, filter) {
    if (error.status !== 422) return false;
    const about = error.violations.some((v) => v.field === 'filter') || /filter/i.test(error.message);
    if (!about) return false;
    filter.input.setAttribute('aria-invalid', 'true');
    const text = error.violations.find((v) => v.field === 'filter');
    showIn(filter.errorArea, h('p', { class: 'error', role: 'alert' }, 'Bad filter: ', text ? text.description : error.message));
    return true;
  }

  function episodeCard(ep, actions) {
    const meta = h('div', { class: 'meta' },
      h('strong', { class: 'producer' }, ep.producer_id || '(unknown)'),
      ep.produced_for_id ? h('span', null, ` → ${ep.produced_for_id}`) : null,
      ep.producer_role ? h('span', { class: 'chip' }, ep.producer_role) : null,
      time(ep.created_at),
      ep.expires_at ? h('span', { class: 'chip expires' }, 'expires ', time(ep.expires_at)) : null,
      typeof ep.score === 'number' ? h('span', { class: 'score', 'data-score': String(ep.score) }, `score ${ep.score.toFixed(4)}`) : null);
    const metadata = Object.entries(ep.metadata || {});
    return h('li', { class: 'card episode', 'data-uid': ep.uid },
      h('div', { class: 'head' }, meta, actions ? h('div', { class: 'actions' }, actions) : null),
      h('p', { class: 'content' }, ep.content),
      scoreParts(ep.score_parts),
      metadata.length ? h('ul', { class: 'metadata', 'aria-label': 'Metadata' }, metadata.map(([k, v]) => h('li', { class: 'chip' }, `${k} = ${v}`))) : null,
      h('p', { class: 'uid-line' }, 'uid ', h('code', { class: 'uid' }, ep.uid)));
  }

  // What an episode's score is made of (a search with `explain`), as text only: each
  // part the ranking used, in the score's units.
  const SCORE_PARTS = [
    ['lexical', 'lexical', 'BM25, including the conversational context field'],
    ['dense', 'dense', 'embedding similarity (standardised, smoothed) times its weight'],
    ['context', 'context', 'what neighbouring turns added'],
    ['session', 'session', 'what the episode’s session as a whole added'],
    ['time', 'time', 'what the question’s time expression added'],
    ['participant', 'participant', 'the lift for a turn by a participant the question names'],
  ];

  function scoreParts(parts) {
    if (!parts || typeof parts !== 'object') return null;
    const used = SCORE_PARTS.filter(([key]) => typeof parts[key] === 'number' && parts[key] !== 0);
    const shown = used.length ? used : SCORE_PARTS.slice(0, 1);
    return h('ul', { class: 'score-parts', 'aria-label': 'Score parts' },
      shown.map(([key, label, about]) => {
        const value = typeof parts[key] === 'number' ? parts[key] : 0;
        return h('li', { class: 'chip score-part', 'data-part': key, title: about },
          `${label} ${value >= 0 ? '+' : ''}${value.toFixed(4)}`);
      }));
  }

  // --- episodes ------------------------------------------------------------------------

  async function renderEpisodes(body, route, gen) {
    const { org, project, params } = route;
    const page = pageParam(params);
    const filterText = params.get('filter') || '';
    const filter = filterForm('episode-filter', filterText,
      (f) => go(link(org, project, 'episodes', { filter: f })), "producer_id = 'alice' AND m.topic = 'travel'");
    const listArea = h('div', { class: 'list-area' }, loading('Loading episodes…'));
    showIn(body, retentionForm(org, project), filter.form, listArea);
    let episodes;
    let next;
    let first;
    try {
      ({ items: episodes, next, first } = await listPage(org, project, 'episodic', EPISODE_PAGE, page, filterText));
    } catch (error) {
      if (gen !== generation) return;
      if (filterError(error, filter)) showIn(listArea, empty('Fix the filter to list episodes.'));
      else showIn(listArea, errorBox(error, 'Could not list the episodes'));
      return;
    }
    if (gen !== generation) return;
    const hrefOf = (n) => link(org, project, 'episodes', { filter: filterText, page: n });
    if (episodes.length === 0) {
      const text = page > 0 ? 'No more episodes.' : filterText ? 'No episodes match this filter.' : 'No episodes yet.';
      showIn(listArea, empty(text), page > 0 ? pager(page, false, hrefOf) : null);
      return;
    }
    const list = h('ol', { class: 'episodes', start: String(first), 'aria-label': 'Episodes' });
    for (const ep of episodes) {
      const del = h('button', { type: 'button', class: 'danger quiet', 'aria-label': `Delete episode ${ep.uid}` }, 'Delete');
      del.addEventListener('click', () => deleteEpisode(route, ep, del, episodes.length));
      const forget = h('button', { type: 'button', class: 'danger quiet', 'aria-label': `Forget user ${ep.producer_id}` }, 'Forget user');
      forget.addEventListener('click', () => forgetUser(route, ep.producer_id, forget));
      list.append(episodeCard(ep, [del, forget]));
    }
    showIn(listArea,
      h('p', { class: 'summary' }, `Episodes ${first}–${first + episodes.length - 1}, oldest first${filterText ? ', filtered' : ''}`),
      list,
      pager(page, Boolean(next), hrefOf));
  }

  // --- retention (issue 29) -------------------------------------------------------------

  // The project's episode retention in days (0 or empty keeps episodes until deleted);
  // expired episodes are never listed and are deleted within a minute.
  function retentionForm(org, project) {
    const input = h('input', { type: 'number', min: '0', step: 'any', id: 'retention-days', 'aria-label': 'Retention in days' });
    const state = h('span', { class: 'retention-state' }, 'Loading…');
    const save = h('button', { type: 'submit' }, 'Save');
    const form = h('form', { class: 'retention', 'aria-label': 'Episode retention' },
      h('label', { for: 'retention-days' }, 'Keep episodes for (days, 0 = forever) '), input, save, ' ', state);
    const show = (seconds) => {
      state.textContent = seconds ? `Episodes older than ${+(seconds / 86400).toFixed(3)} days expire.` : 'Episodes are kept until deleted.';
      input.value = seconds ? String(+(seconds / 86400).toFixed(3)) : '0';
    };
    api('/memory/episodic/config/get', ref(org, project))
      .then((c) => show(c.episode_retention_seconds))
      .catch((error) => { state.textContent = `Could not read the retention: ${error.message}`; });
    form.addEventListener('submit', async (event) => {
      event.preventDefault();
      const seconds = Math.round(Number(input.value || 0) * 86400);
      await busy(save, 'Saving…', async () => {
        try {
          await api('/memory/episodic/config', { ...ref(org, project), episode_retention_seconds: seconds });
          show(seconds);
          notice(seconds ? 'Retention saved: older episodes are hidden now and deleted within a minute.' : 'Retention cleared.');
        } catch (error) {
          notice(`Could not save the retention: ${error.message}`);
        }
      });
    });
    return form;
  }

  async function deleteEpisode(route, ep, button, onPage) {
    const preview = ep.content.length > 160 ? `${ep.content.slice(0, 160)}…` : ep.content;
    const yes = await confirmAction('Delete this episode?', `${ep.producer_id}: “${preview}” — it is removed from search, and features lose this citation.`, 'Delete episode');
    if (!yes) return;
    await busy(button, 'Deleting…', async () => {
      try {
        await api('/memories/episodic/delete', { ...ref(route.org, route.project), episodic_ids: [ep.uid] });
      } catch (error) {
        notice(`Could not delete the episode: ${error.message}`);
        return;
      }
      const page = pageParam(route.params);
      const back = onPage === 1 && page > 0;
      notice('Episode deleted.', back);
      if (back) {
        go(link(route.org, route.project, 'episodes', { filter: route.params.get('filter') || '', page: page - 1 }));
      } else {
        render();
      }
    });
  }

  /** "Forget this user": a dry run's counts first, then, once confirmed, the forget
   * itself across the org, and its receipt (counts only). */
  async function forgetUser(route, subject, button) {
    const ask = (dryRun) => api('/forget', { org_id: route.org, subject, project_ids: [], dry_run: dryRun });
    const counts = (r) => r.projects.filter((p) => p.episodes_deleted || p.features_deleted || p.sets_deleted || p.citations_removed)
      .map((p) => `${p.project_id}: ${plural(p.episodes_deleted, 'episode')}, ${plural(p.features_deleted, 'feature')}, ` +
        `${plural(p.citations_removed, 'citation')}, ${plural(p.summaries_deleted, 'summary', 'summaries')}, ${plural(p.sets_deleted, 'set')}`)
      .join('; ') || 'nothing';
    let preview;
    try {
      preview = await busy(button, 'Counting…', () => ask(true));
    } catch (error) {
      notice(`Could not count what forgetting ${subject} removes: ${error.message}`);
      return;
    }
    const yes = await confirmAction(`Forget ${subject}?`,
      `Everywhere in ${route.org}, this removes what ${subject} said or was told, their profile, and what derives from it — ${counts(preview)}. A receipt of the counts is kept.`,
      'Forget user');
    if (!yes) return;
    await busy(button, 'Forgetting…', async () => {
      let receipt;
      try {
        receipt = await ask(false);
      } catch (error) {
        notice(`Could not forget ${subject}: ${error.message}`);
        return;
      }
      notice(`Forgot ${subject} (receipt ${receipt.receipt_id}, ${receipt.completed_at}): ${counts(receipt)}.`, true);
      render();
    });
  }

  // --- search --------------------------------------------------------------------------

  async function renderSearch(body, route, gen) {
    const { org, project, params } = route;
    const q = params.get('q') || '';
    const topK = clampInt(params.get('k'), 1, 100, 10);
    const expand = clampInt(params.get('x'), 0, 100, 0);
    const filterText = params.get('filter') || '';
    const query = h('input', { id: 'search-query', type: 'search', value: q, required: true, autocomplete: 'off' });
    const k = h('input', { id: 'search-top-k', type: 'number', min: '1', max: '100', value: String(topK), inputmode: 'numeric' });
    const x = h('input', { id: 'search-expand', type: 'number', min: '0', max: '100', value: String(expand), inputmode: 'numeric' });
    const f = h('input', { id: 'search-filter', type: 'text', value: filterText, spellcheck: 'false', autocomplete: 'off', placeholder: "producer_id = 'alice'" });
    const filterErrorArea = h('div', { class: 'field-error', id: 'search-filter-error', 'aria-live': 'assertive' });
    f.setAttribute('aria-describedby', filterErrorArea.id);
    const form = h('form', { class: 'search-form', role: 'search', novalidate: true },
      h('div', { class: 'field wide' }, h('label', { for: 'search-query' }, 'Query'), query),
      field('Results (top_k)', k),
      field('Context (expand_context)', x, 'Neighbouring episodes per hit'),
      h('div', { class: 'field wide' }, h('label', { for: 'search-filter' }, 'Filter (optional)'), f, filterErrorArea),
      h('div', { class: 'actions' }, h('button', { type: 'submit', class: 'primary' }, 'Search')));
    form.addEventListener('submit', (e) => {
      e.preventDefault();
      if (!query.value.trim()) {
        query.focus();
        return;
      }
      go(link(org, project, 'search', {
        q: query.value.trim(), k: clampInt(k.value, 1, 100, 10), x: clampInt(x.value, 0, 100, 0), filter: f.value.trim(),
      }));
    });
    const results = h('div', { class: 'results', 'aria-live': 'polite' });
    showIn(body, form, results);
    if (!q) {
      showIn(results, empty('Type a query to search this project’s episodes and features.'));
      query.dataset.autofocus = '';
      return;
    }
    showIn(results, loading('Searching…'));
    let content;
    try {
      const answer = await api('/memories/search', {
        ...ref(org, project), query: q, top_k: topK, expand_context: expand, filter: filterText,
        explain: true,
      });
      content = answer.content || {};
    } catch (error) {
      if (gen !== generation) return;
      if (filterError(error, { input: f, errorArea: filterErrorArea })) showIn(results, empty('Fix the filter to search.'));
      else showIn(results, errorBox(error, 'The search failed'));
      return;
    }
    if (gen !== generation) return;
    const episodic = content.episodic_memory || { long_term_memory: { episodes: [] }, short_term_memory: { episodes: [], episode_summary: [''] } };
    const hits = (episodic.long_term_memory && episodic.long_term_memory.episodes) || [];
    const recent = (episodic.short_term_memory && episodic.short_term_memory.episodes) || [];
    const summaries = ((episodic.short_term_memory && episodic.short_term_memory.episode_summary) || []).filter((s) => s);
    const features = content.semantic_memory || [];
    showIn(results,
      h('p', { class: 'summary' }, `Ranked by `, h('strong', null, rankingMode(state.project.data, state.config)),
        ` · top_k ${topK} · expand_context ${expand}${filterText ? ' · filtered' : ''}`),
      h('div', { class: 'result-columns' },
        h('section', { class: 'result-group', 'aria-labelledby': 'long-term-title' },
          h('h2', { id: 'long-term-title' }, `Long-term memory (${plural(hits.length, 'hit')})`),
          hits.length ? h('ol', { class: 'episodes hits' }, hits.map((ep) => episodeCard(ep))) : empty('No episode matches.')),
        h('div', { class: 'side' }, shortTerm(summaries, recent, features))));
  }

  function shortTerm(summaries, recent, features) {
    return [
      h('section', { class: 'result-group', 'aria-labelledby': 'summary-title' },
        h('h2', { id: 'summary-title' }, 'Short-term summary'),
        summaries.length ? summaries.map((s) => h('p', { class: 'card summary-text' }, s)) : empty('No summary yet.')),
      h('section', { class: 'result-group', 'aria-labelledby': 'features-title' },
        h('h2', { id: 'features-title' }, `Features (${features.length})`),
        features.length ? h('ol', { class: 'features hits' }, features.map((ft) => featureHit(ft))) : empty('No feature matches.')),
      h('section', { class: 'result-group', 'aria-labelledby': 'short-term-title' },
        h('h2', { id: 'short-term-title' }, `Short-term memory (${plural(recent.length, 'recent episode')})`),
        recent.length ? h('ol', { class: 'episodes' }, recent.map((ep) => episodeCard(ep))) : empty('No recent episodes.')),
    ];
  }

  function clampInt(value, min, max, fallback) {
    const n = Number.parseInt(value, 10);
    if (!Number.isFinite(n)) return fallback;
    return Math.min(max, Math.max(min, n));
  }

  function featureHit(ft) {
    return h('li', { class: 'card feature' },
      h('div', { class: 'meta' }, h('span', { class: 'chip tag' }, ft.tag), h('strong', null, ft.feature_name),
        typeof ft.score === 'number' ? h('span', { class: 'score', 'data-score': String(ft.score) }, `score ${ft.score.toFixed(4)}`) : null,
        h('span', { class: 'muted' }, ft.category)),
      h('p', { class: 'content value' }, ft.value));
  }

  // --- semantic memory -----------------------------------------------------------------

  async function renderSemantic(body, route, gen) {
    const { org, project, params } = route;
    const page = pageParam(params);
    const filterText = params.get('filter') || '';
    const refresh = h('button', { type: 'button', id: 'refresh-features' }, 'Refresh');
    refresh.addEventListener('click', () => render());
    const filter = filterForm('feature-filter', filterText,
      (f) => go(link(org, project, 'semantic', { filter: f })), "tag = 'preferences'");
    const listArea = h('div', { class: 'list-area' }, loading('Loading features…'));
    const addArea = h('section', { class: 'card', 'aria-labelledby': 'add-feature-title' });
    showIn(body, h('div', { class: 'toolbar' }, filter.form, refresh), listArea, addArea);
    let features;
    let next;
    let sets = [];
    try {
      const [answer, setList] = await Promise.all([
        listPage(org, project, 'semantic', FEATURE_PAGE, page, filterText),
        api('/memories/semantic/set_id/list', ref(org, project)).catch(() => ({ sets: [] })),
      ]);
      ({ items: features, next } = answer);
      sets = setList.sets || [];
    } catch (error) {
      if (gen !== generation) return;
      if (filterError(error, filter)) showIn(listArea, empty('Fix the filter to list features.'));
      else showIn(listArea, errorBox(error, 'Could not list the features'));
      return;
    }
    if (gen !== generation) return;
    const setInfo = new Map(sets.map((s) => [s.id, s]));
    renderAddFeature(addArea, route, sets);
    const hrefOf = (n) => link(org, project, 'semantic', { filter: filterText, page: n });
    if (features.length === 0) {
      const text = page > 0 ? 'No more features.' : filterText ? 'No features match this filter.'
        : 'No features yet. The server’s language model distils them from messages (with --llm-base-url); or add one by hand below.';
      showIn(listArea, empty(text), page > 0 ? pager(page, false, hrefOf) : null);
      return;
    }
    // Grouped by set, then category, in the order the page lists them.
    const groups = new Map();
    for (const ft of features) {
      if (!groups.has(ft.set_id)) groups.set(ft.set_id, new Map());
      const cats = groups.get(ft.set_id);
      if (!cats.has(ft.category)) cats.set(ft.category, []);
      cats.get(ft.category).push(ft);
    }
    const nodes = [h('p', { class: 'summary' }, `${plural(features.length, 'feature')} on this page, by set and category`)];
    for (const [setId, cats] of groups) {
      const info = setInfo.get(setId);
      nodes.push(h('section', { class: 'set', 'data-set': setId },
        h('h2', null, setLabel(setId, info), ' ', h('code', { class: 'uid' }, setId)),
        [...cats].map(([category, list]) => h('section', { class: 'category', 'data-category': category },
          h('h3', null, category || '(no category)'),
          h('ul', { class: 'features' }, list.map((ft) => featureCard(ft, route)))))));
    }
    nodes.push(pager(page, Boolean(next), hrefOf));
    showIn(listArea, ...nodes);
  }

  function setLabel(setId, info) {
    const kind = setId.startsWith('mem_user_set_') ? 'User set'
      : setId.startsWith('mem_org_set_') ? 'Org set'
        : setId.startsWith('mem_project_set_') ? 'Project set' : 'Set';
    const name = info && info.name ? ` “${info.name}”` : '';
    const tags = info && info.tags && info.tags.length ? ` (${info.tags.join(', ')})` : '';
    return `${kind}${name}${tags}`;
  }

  function featureCard(ft, route) {
    const id = ft.metadata && ft.metadata.id;
    const citations = (ft.metadata && ft.metadata.citations) || [];
    const panelId = `cites-${id}`;
    const card = h('li', { class: 'card feature', 'data-feature': id });
    const panel = h('div', { class: 'citations', id: panelId, hidden: true });
    const cite = h('button', { type: 'button', class: 'quiet', 'aria-expanded': 'false', 'aria-controls': panelId, disabled: citations.length === 0 },
      citations.length ? `${plural(citations.length, 'citation')}` : 'no citations');
    cite.addEventListener('click', () => toggleCitations(route, citations, cite, panel));
    const edit = h('button', { type: 'button', class: 'quiet', 'aria-label': `Edit feature ${ft.feature_name}` }, 'Edit');
    const del = h('button', { type: 'button', class: 'danger quiet', 'aria-label': `Delete feature ${ft.feature_name}` }, 'Delete');
    del.addEventListener('click', () => deleteFeature(route, ft, del));
    const historyId = `history-${id}`;
    const historyPanel = h('div', { class: 'feature-history', id: historyId, hidden: true });
    const history = h('button', { type: 'button', class: 'quiet', 'aria-expanded': 'false', 'aria-controls': historyId,
      'aria-label': `History of feature ${ft.feature_name}` }, 'History');
    history.addEventListener('click', () => toggleHistory(route, id, history, historyPanel));
    const view = h('div', { class: 'feature-view' },
      h('div', { class: 'meta' }, h('span', { class: 'chip tag', title: 'tag' }, ft.tag), h('strong', { class: 'feature-name' }, ft.feature_name),
        time(ft.updated_at)),
      h('p', { class: 'content value' }, ft.value),
      h('div', { class: 'foot' }, cite, history, edit, del));
    edit.addEventListener('click', () => editFeature(route, ft, card, view));
    card.append(view, panel, historyPanel);
    return card;
  }

  async function toggleCitations(route, ids, button, panel) {
    const open = button.getAttribute('aria-expanded') === 'true';
    button.setAttribute('aria-expanded', String(!open));
    panel.hidden = open;
    if (open || panel.dataset.loaded) return;
    showIn(panel, loading('Loading the cited messages…'));
    const found = [];
    const missing = [];
    try {
      for (let i = 0; i < ids.length; i += 100) {
        const answer = await api('/memories/episodic/get', { ...ref(route.org, route.project), episodic_ids: ids.slice(i, i + 100) });
        found.push(...answer.content.episodic_memory);
        missing.push(...answer.content.missing);
      }
    } catch (error) {
      showIn(panel, errorBox(error, 'Could not load the cited messages'));
      return;
    }
    panel.dataset.loaded = '1';
    showIn(panel,
      h('h4', null, 'Cited messages'),
      found.length ? h('ol', { class: 'episodes cited' }, found.map((ep) => episodeCard(ep))) : null,
      missing.length ? h('div', { class: 'missing' },
        h('p', null, `${plural(missing.length, 'cited message')} no longer in this project (deleted):`),
        h('ul', null, missing.map((m) => h('li', null, h('code', { class: 'uid' }, m))))) : null);
  }

  // A feature's versions, oldest first: what each said, when it held, what changed it.
  async function toggleHistory(route, id, button, panel) {
    const open = button.getAttribute('aria-expanded') === 'true';
    button.setAttribute('aria-expanded', String(!open));
    panel.hidden = open;
    if (open) return;
    showIn(panel, loading('Loading the history…'));
    let versions;
    try {
      ({ versions } = await api('/memories/semantic/feature/history', { ...ref(route.org, route.project), feature_id: id }));
    } catch (error) {
      showIn(panel, errorBox(error, 'Could not load the history'));
      return;
    }
    showIn(panel,
      h('h4', null, `History (${plural(versions.length, 'version')})`),
      h('ol', { class: 'versions' }, versions.map((v) => h('li', { class: v.valid_to ? 'version' : 'version current' },
        h('div', { class: 'meta' }, h('span', { class: 'chip' }, v.changed_by), time(v.valid_from), ' – ',
          v.valid_to ? time(v.valid_to) : h('strong', null, 'current')),
        h('p', { class: 'content value' }, `${v.tag} · ${v.feature_name}: ${v.value}`)))));
  }

  function editFeature(route, ft, card, view) {
    const tag = h('input', { value: ft.tag, required: true, autocomplete: 'off' });
    const name = h('input', { value: ft.feature_name, required: true, autocomplete: 'off' });
    const value = h('textarea', { rows: '3', required: true }, ft.value);
    const errorArea = h('div', { class: 'form-error', 'aria-live': 'assertive' });
    const save = h('button', { type: 'submit', class: 'primary' }, 'Save');
    const cancel = h('button', { type: 'button', class: 'quiet' }, 'Cancel');
    const form = h('form', { class: 'grid-form edit-feature', novalidate: true, 'aria-label': `Edit feature ${ft.feature_name}` },
      field('Tag', tag), field('Feature', name), field('Value', value, null, true),
      h('div', { class: 'actions' }, save, cancel), errorArea);
    cancel.addEventListener('click', () => {
      form.replaceWith(view);
      $('button', view).focus();
    });
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      await busy(save, 'Saving…', async () => {
        try {
          await api('/memories/semantic/feature/update', {
            ...ref(route.org, route.project), feature_id: ft.metadata.id, tag: tag.value.trim(), feature: name.value.trim(), value: value.value,
          });
        } catch (error) {
          showIn(errorArea, errorBox(error, 'Could not save'));
          return;
        }
        notice('Feature saved.');
        render();
      });
    });
    view.replaceWith(form);
    tag.focus();
  }

  async function deleteFeature(route, ft, button) {
    const yes = await confirmAction('Delete this feature?', `${ft.tag} · ${ft.feature_name}: “${ft.value}”`, 'Delete feature');
    if (!yes) return;
    await busy(button, 'Deleting…', async () => {
      try {
        await api('/memories/semantic/delete', { ...ref(route.org, route.project), semantic_ids: [ft.metadata.id] });
      } catch (error) {
        notice(`Could not delete the feature: ${error.message}`);
        return;
      }
      notice('Feature deleted.');
      render();
    });
  }

  function renderAddFeature(section, route, sets) {
    let setInput;
    if (sets.length) {
      setInput = h('select', { name: 'set', required: true },
        sets.map((s) => h('option', { value: s.id }, `${setLabel(s.id, s)} — ${s.id}`)));
    } else {
      setInput = h('input', { name: 'set', required: true, autocomplete: 'off', spellcheck: 'false', placeholder: 'mem_user_set_…' });
    }
    setInput.id = 'add-feature-set';
    const category = h('input', { id: 'add-feature-category', value: 'profile', required: true, autocomplete: 'off' });
    const tag = h('input', { id: 'add-feature-tag', required: true, autocomplete: 'off' });
    const name = h('input', { id: 'add-feature-name', required: true, autocomplete: 'off' });
    const value = h('textarea', { id: 'add-feature-value', rows: '2', required: true });
    const citations = h('input', { id: 'add-feature-citations', autocomplete: 'off', spellcheck: 'false' });
    const errorArea = h('div', { class: 'form-error', 'aria-live': 'assertive' });
    const submit = h('button', { type: 'submit', class: 'primary' }, 'Add feature');
    const form = h('form', { class: 'grid-form', novalidate: true },
      field('Set', setInput, null, true),
      field('Category', category, 'A category of that set (user sets have profile)'),
      field('Tag', tag), field('Feature', name),
      field('Value', value, null, true),
      field('Citations (optional)', citations, 'Episode uids, separated by spaces or commas', true),
      h('div', { class: 'actions' }, submit), errorArea);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      errorArea.replaceChildren();
      await busy(submit, 'Adding…', async () => {
        try {
          await api('/memories/semantic/feature', {
            ...ref(route.org, route.project),
            set_id: setInput.value.trim(),
            category_name: category.value.trim(),
            tag: tag.value.trim(),
            feature: name.value.trim(),
            value: value.value,
            citations: citations.value.split(/[\s,]+/).filter(Boolean),
          });
        } catch (error) {
          showIn(errorArea, errorBox(error, 'Could not add the feature'));
          return;
        }
        notice('Feature added.');
        render();
      });
    });
    showIn(section,
      h('h2', { id: 'add-feature-title' }, 'Add a feature by hand'),
      sets.length ? null : h('p', { class: 'muted' }, 'This project has no sets yet: they appear with its first messages.'),
      form);
  }

  /** The org's language-model usage today and its daily token budget, below the
   * project's views; an admin key may change the budget here. */
  async function renderUsage(main, org, gen) {
    const section = h('section', { class: 'card usage', 'aria-labelledby': 'usage-title' },
      h('h2', { id: 'usage-title' }, `Model usage of ${org} today`), loading('Reading usage…'));
    main.append(section);
    let report;
    try {
      report = await api('/usage', { org_id: org });
    } catch (error) {
      if (gen === generation) showIn(section, h('h2', { id: 'usage-title' }, `Model usage of ${org} today`), errorBox(error, 'Could not read the usage'));
      return;
    }
    if (gen !== generation) return;
    const n = (x) => Number(x).toLocaleString('en');
    const table = h('table', { class: 'usage-figures' },
      h('thead', null, h('tr', null, ...['Purpose', 'Calls', 'Prompt tokens', 'Completion tokens'].map((t) => h('th', { scope: 'col' }, t)))),
      h('tbody', null, ...report.usage.map((u) => h('tr', null,
        h('th', { scope: 'row' }, u.purpose), h('td', null, n(u.calls)), h('td', null, n(u.prompt_tokens)), h('td', null, n(u.completion_tokens))))));
    const b = report.budget;
    const limit = b.daily_tokens === 0 ? 'unlimited' : `${n(b.daily_tokens)} tokens a day`;
    const status = h('p', { class: 'budget' }, `Budget: ${limit}; ${n(b.used_today)} language-model tokens used today (embedding is counted, not budgeted).`);
    const paused = b.paused_until
      ? h('p', { class: 'error', role: 'status' }, 'Over budget: semantic ingestion is paused until ', time(b.paused_until), ' (messages stay queued; adds and searches go on).')
      : null;
    const input = h('input', { type: 'number', min: '0', step: '1', value: String(b.daily_tokens), id: 'budget-tokens' });
    const submit = h('button', { type: 'submit' }, 'Set budget');
    const errorArea = h('div');
    const form = h('form', { class: 'budget-form' }, field('Daily tokens (0 = unlimited; admin key)', input), submit, errorArea);
    form.addEventListener('submit', async (e) => {
      e.preventDefault();
      errorArea.replaceChildren();
      await busy(submit, 'Setting…', async () => {
        try {
          await api('/usage/budget', { org_id: org, daily_tokens: Number(input.value) });
        } catch (error) {
          showIn(errorArea, errorBox(error, 'Could not set the budget'));
          return;
        }
        notice('Budget set.');
        render();
      });
    });
    showIn(section, h('h2', { id: 'usage-title' }, `Model usage of ${org} today`), table, status, paused, form);
  }

  window.addEventListener('hashchange', () => {
    // A notice belongs to the view it was shown on, unless it announced this move.
    if (noticeMoves) noticeMoves = false;
    else notice('');
    render();
  });
  render();
})();
