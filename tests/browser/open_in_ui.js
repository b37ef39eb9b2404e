// Opens a Perfetto UI deep link in headless Chromium, waits until the trace has loaded and the
// expected process tracks are listed, and saves a screenshot.
//
//   [EXPAND="group,group"] node open_in_ui.js URL SCREENSHOT.png "process name" ["process name" ...]
//
// Prints one JSON line: {"found": [...], "missing": [...], "title": ...}; exits 1 when a name is
// missing after the timeout.
'use strict';

const { chromium } = require('playwright-core');

async function main() {
  const [url, screenshot, ...names] = process.argv.slice(2);
  const browser = await chromium.launch({
    executablePath: process.env.CHROMIUM || '/usr/bin/chromium',
    args: ['--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
           '--disable-background-networking', '--disable-component-update', '--disable-sync'],
  });
  let found = [];
  let missing = names;
  try {
    const page = await browser.newPage({ viewport: { width: 1600, height: 1000 } });
    await page.goto(url, { waitUntil: 'load', timeout: 60000 });
    const deadline = Date.now() + 90000;
    while (Date.now() < deadline) {
      const text = await page.evaluate(() => document.body ? document.body.innerText : '');
      found = names.filter((n) => text.includes(n));
      missing = names.filter((n) => !text.includes(n));
      if (missing.length === 0) break;
      await page.waitForTimeout(500);
    }
    // Open the groups named in $EXPAND (comma-separated), as a user clicks on a group's title.
    for (const name of (process.env.EXPAND || '').split(',').filter(Boolean)) {
      const title = page.locator('.pf-track__title-popup', { hasText: name }).first();
      if (await title.count()) await title.click({ force: true });  // a long name's ellipsis span covers it
      await page.waitForTimeout(300);
    }
    await page.waitForTimeout(1000);  // let the tracks render before the picture
    await page.screenshot({ path: screenshot });
    console.log(JSON.stringify({ found, missing, title: await page.title() }));
  } finally {
    await browser.close();
  }
  process.exit(missing.length ? 1 : 0);
}

main().catch((e) => { console.error(String(e && e.stack || e)); process.exit(2); });
