// Opens a Perfetto UI deep link in headless Chromium, waits until the trace has loaded, the
// expected process tracks are listed and their summaries are drawn, saves that first screen
// untouched, and measures what it shows.
//
//   [EXPAND="group,group"] [EXPANDED=expanded.png] node open_in_ui.js URL SCREENSHOT.png "process name" ...
//
// Prints one JSON line:
//   {"found": [...], "missing": [...], "title": ...,
//    "rows": [{"title", "ink"}, ...],   the top-level rows of the first screen, top to bottom, and how
//                                       many pixels of each row's timeline are not background
//    "overview": n,                     the same count for the overview bar
//    "expanded": {"group": [titles of its tracks, top to bottom], ...},
//    "query": text}                     the result of the SQL query in $QUERY, typed into the omnibox
// after opening the groups named in $EXPAND (a second screenshot, $EXPANDED). Exits 1 when a name
// is missing after the timeout.
'use strict';

const fs = require('fs');
const { chromium } = require('playwright-core');

// The top-level rows (title, the box of the row's timeline) and the overview bar's box, in CSS px.
function layout() {
  const rows = [];
  for (const title of document.querySelectorAll('.pf-track__title-popup')) {
    const header = title.closest('.pf-track__header');
    const shell = title.closest('.pf-track__shell');
    if (!header || !shell || header.closest('.pf-track__children')) continue;  // nested tracks
    const h = header.getBoundingClientRect();
    const s = shell.getBoundingClientRect();
    rows.push({ title: title.textContent.trim(), box: [s.right, h.top, h.right - s.right, h.height] });
  }
  // The overview bar below its time labels (text would count as drawing).
  const o = document.querySelector('.pf-overview-timeline');
  const r = o ? o.getBoundingClientRect() : { left: 0, top: 0, width: 0, height: 0 };
  return { rows, overview: [r.left, r.top + 20, r.width, r.height - 20] };
}

// Pixels of each box, in a screenshot (PNG, base64), that differ from the box's own background (its
// most common colour) by more than a grid line does: what the track drew there.
async function ink({ png, boxes }) {
  const blob = await (await fetch('data:image/png;base64,' + png)).blob();
  const bitmap = await createImageBitmap(blob);
  const scale = bitmap.width / window.innerWidth;
  const canvas = new OffscreenCanvas(bitmap.width, bitmap.height);
  const ctx = canvas.getContext('2d');
  ctx.drawImage(bitmap, 0, 0);
  return boxes.map(([x, y, w, h]) => {
    // A margin of 2 px: row borders are not drawing.
    const [x0, y0] = [Math.round((x + 2) * scale), Math.round((y + 2) * scale)];
    const [w0, h0] = [Math.round((w - 4) * scale), Math.round((h - 4) * scale)];
    if (w0 <= 0 || h0 <= 0) return 0;
    const data = ctx.getImageData(x0, y0, w0, h0).data;
    const counts = new Map();
    for (let i = 0; i < data.length; i += 4) {
      const key = (data[i] << 16) | (data[i + 1] << 8) | data[i + 2];
      counts.set(key, (counts.get(key) || 0) + 1);
    }
    const bg = [...counts.entries()].reduce((a, b) => (b[1] > a[1] ? b : a))[0];
    const [br, bgr, bb] = [bg >> 16, (bg >> 8) & 255, bg & 255];
    let n = 0;
    for (let i = 0; i < data.length; i += 4) {
      const d = Math.max(Math.abs(data[i] - br), Math.abs(data[i + 1] - bgr), Math.abs(data[i + 2] - bb));
      if (d > 48) n++;  // grid lines and row stripes differ by less
    }
    return n;
  });
}

async function measure(page, png) {
  const { rows, overview } = await page.evaluate(layout);
  const counts = await page.evaluate(ink, { png: png.toString('base64'), boxes: [overview, ...rows.map((r) => r.box)] });
  return { overview: counts[0], rows: rows.map((r, i) => ({ title: r.title, ink: counts[i + 1] })) };
}

// The titles of the tracks inside the open group titled ``name`` (or starting "name "), top to bottom.
function childTitles(name) {
  for (const title of document.querySelectorAll('.pf-track__title-popup')) {
    const text = title.textContent.trim();
    if (text !== name && !text.startsWith(name + ' ')) continue;
    const track = title.closest('.pf-track');
    const children = track && track.querySelector('.pf-track__children');
    if (!children) continue;
    return [...children.querySelectorAll('.pf-track__title-popup')].map((t) => t.textContent.trim());
  }
  return null;
}

async function main() {
  const [url, screenshot, ...names] = process.argv.slice(2);
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  let found = [];
  let missing = names;
  const out = {};
  try {
    const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
    await page.goto(url, { waitUntil: 'load', timeout: 60000 });
    let deadline = Date.now() + 90000;
    while (Date.now() < deadline) {
      const text = await page.evaluate(() => document.body ? document.body.innerText : '');
      found = names.filter((n) => text.includes(n));
      missing = names.filter((n) => !text.includes(n));
      if (missing.length === 0) break;
      await page.waitForTimeout(500);
    }
    // The summaries are drawn once their queries return: screenshot until two in a row measure
    // the same, and keep the last as the first screen.
    let png = await page.screenshot();
    let last = await measure(page, png);
    deadline = Date.now() + 30000;
    while (Date.now() < deadline) {
      await page.waitForTimeout(1000);
      png = await page.screenshot();
      const now = await measure(page, png);
      const same = JSON.stringify(now) === JSON.stringify(last);
      last = now;
      if (same) break;
    }
    fs.writeFileSync(screenshot, png);
    Object.assign(out, last);
    // Then open the groups named in $EXPAND, as a user clicks on a group's title.
    const expand = (process.env.EXPAND || '').split(',').filter(Boolean);
    out.expanded = {};
    for (const name of expand) {
      const title = page.locator('.pf-track__title-popup', { hasText: name }).first();
      if (await title.count()) await title.click({ force: true });  // a long name's ellipsis span covers it
      await page.waitForTimeout(300);
    }
    if (expand.length) {
      await page.waitForTimeout(1500);  // let the tracks render before the picture
      for (const name of expand) out.expanded[name] = await page.evaluate(childTitles, name);
      if (process.env.EXPANDED) await page.screenshot({ path: process.env.EXPANDED });
    }
    // Then a query typed into the omnibox in SQL mode, as a user asks the UI's own engine
    // ($QUERY): the text of its result.
    if (process.env.QUERY) {
      const box = page.locator('.pf-omnibox input').first();
      await box.click();
      await page.keyboard.type(':');
      await page.waitForTimeout(300);
      await page.keyboard.type(process.env.QUERY, { delay: 20 });
      // The omnibox takes keys as it redraws: press Enter once it holds the whole query.
      for (let i = 0; i < 20 && (await box.inputValue()) !== process.env.QUERY; i++) await page.waitForTimeout(250);
      await page.keyboard.press('Enter');
      deadline = Date.now() + 30000;
      let text = '';
      while (Date.now() < deadline && !/Query result \(/.test(text)) {
        await page.waitForTimeout(500);
        text = await page.evaluate(() => document.body.innerText);
      }
      out.query = text.slice(text.search(/Query result \(/));
      if (process.env.QUERIED) await page.screenshot({ path: process.env.QUERIED });
    }
    out.title = await page.title();
  } finally {
    await browser.close();
  }
  console.log(JSON.stringify({ found, missing, ...out }));
  process.exit(missing.length ? 1 : 0);
}

main().catch((e) => { console.error(String(e && e.stack || e)); process.exit(2); });
