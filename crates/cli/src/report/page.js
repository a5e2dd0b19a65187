// Draws the report's two time axes from the JSON in #data; hover shows details.
(function () {
  const d = JSON.parse(document.getElementById('data').textContent);
  const palette = ['#1f77b4', '#ff7f0e', '#2ca02c', '#d62728', '#9467bd', '#8c564b', '#e377c2', '#7f7f7f', '#bcbd22', '#17becf'];
  const LABEL = 260, PX = 2, W = LABEL + d.bins * PX;
  const tip = document.getElementById('tip');
  const secs = (ns) => (ns / 1e9).toFixed(9);
  const binTime = (b) => d.start + b * d.width;
  function axis(ctx, y) {
    ctx.fillStyle = '#444';
    ctx.font = '11px sans-serif';
    for (let i = 0; i <= 4; i++) {
      const b = Math.min(d.bins - 1, Math.round(i * d.bins / 4));
      ctx.fillText(secs(binTime(b)) + ' s', LABEL + b * PX - (i === 4 ? 90 : 0), y);
    }
  }
  function setup(canvas, rows, rowH, cellsOf, paint, describe) {
    const H = rows.length * rowH + 16;
    canvas.width = W;
    canvas.height = H;
    const ctx = canvas.getContext('2d');
    const maps = rows.map((r) => new Map(cellsOf(r).map((c) => [c[0], c])));
    rows.forEach((r, i) => {
      const y = i * rowH;
      if (rowH >= 10) {
        ctx.fillStyle = '#222';
        ctx.font = Math.min(12, rowH - 2) + 'px monospace';
        ctx.fillText(r.label.slice(0, 34), 2, y + rowH - 3);
      }
      paint(ctx, r, y, rowH);
    });
    axis(ctx, H - 3);
    canvas.addEventListener('mousemove', (e) => {
      const rect = canvas.getBoundingClientRect();
      const x = (e.clientX - rect.left) * (canvas.width / rect.width), y = (e.clientY - rect.top) * (canvas.height / rect.height);
      const row = Math.floor(y / rowH), bin = Math.floor((x - LABEL) / PX);
      const cell = row < rows.length && bin >= 0 ? maps[row].get(bin) : undefined;
      if (!cell) { tip.style.display = 'none'; return; }
      tip.textContent = describe(rows[row], cell, bin);
      tip.style.display = 'block';
      tip.style.left = (e.pageX + 12) + 'px';
      tip.style.top = (e.pageY + 12) + 'px';
    });
    canvas.addEventListener('mouseleave', () => { tip.style.display = 'none'; });
    return rows.reduce((n, r) => n + cellsOf(r).length, 0);
  }
  // Sites: [bin, pokes, kind, first time, cpu, change, last time] per bin with pokes.
  const rowH = Math.max(4, Math.min(14, Math.floor(600 / Math.max(1, d.sites.length))));
  const pokeCells = setup(document.getElementById('pokes'), d.sites, rowH, (s) => s.cells, (ctx, s, y, h) => {
    for (const c of s.cells) {
      ctx.fillStyle = palette[c[2] % palette.length];
      ctx.fillRect(LABEL + c[0] * PX, y + 1, PX, h - 1);
    }
  }, (s, c) => s.label + ' ' + s.addr + '\n' + c[1] + ' poke(s), ' + d.kinds[c[2]] + (c[1] > 1 ? ' (most)' : '') +
    '\nfirst: ' + secs(c[3]) + ' s on cpu ' + (c[4] < 0 ? '?' : c[4]) + ': ' + d.changes[c[5]] + (c[1] > 1 ? '\nlast: ' + secs(c[6]) + ' s' : ''));
  // CPUs: [bin, instructions, branches, errors, overflows, uncertain, lost].
  const covCells = setup(document.getElementById('coverage'), d.cpus, 22, (c) => c.cells, (ctx, r, y, h) => {
    ctx.fillStyle = '#e6e6e6';
    ctx.fillRect(LABEL, y + 1, d.bins * PX, h - 2);
    for (const c of r.cells) {
      const x = LABEL + c[0] * PX;
      if (c[1] > 0) { ctx.fillStyle = '#4caf50'; ctx.fillRect(x, y + 1, PX, h - 2); }
      if (c[5] > 0) { ctx.fillStyle = '#ff9800'; ctx.fillRect(x, y + 1, PX, 5); }
      if (c[3] > 0) { ctx.fillStyle = '#d32f2f'; ctx.fillRect(x, y + h - 7, PX, 6); }
      if (c[4] > 0 || c[6] > 0) { ctx.fillStyle = '#7b1fa2'; ctx.fillRect(x, y + 7, PX, h - 14); }
    }
  }, (r, c, bin) => r.label + ', ' + secs(binTime(bin)) + '..' + secs(binTime(bin + 1)) + ' s\n' + c[1] + ' instructions, ' + c[2] +
    ' branches, ' + c[3] + ' errors (' + c[4] + ' overflows), ' + c[5] + ' uncertain, ' + c[6] + ' losses');
  document.body.dataset.drawn = 'pokes:' + pokeCells + ' coverage:' + covCells;
})();
