(function () {
  'use strict';
  var errors = [];
  window.addEventListener('error', function (e) {
    errors.push(String(e.message) + ' @' + e.lineno);
    document.body.dataset.errors = errors.join(' | ');
  });
  // Click a column head to sort by it; again to reverse.
  var table = document.getElementById('suite');
  if (table) {
    var heads = table.querySelectorAll('th');
    heads.forEach(function (th, col) {
      var asc = true;
      th.addEventListener('click', function () {
        var body = table.tBodies[0];
        var rows = Array.prototype.slice.call(body.rows);
        var num = th.dataset.sort === 'num';
        rows.sort(function (a, b) {
          var x = a.cells[col], y = b.cells[col];
          var vx = num ? parseFloat(x.dataset.v) : x.textContent;
          var vy = num ? parseFloat(y.dataset.v) : y.textContent;
          var c = num ? vx - vy : String(vx).localeCompare(String(vy));
          return asc ? c : -c;
        });
        asc = !asc;
        rows.forEach(function (r) { body.appendChild(r); });
      });
    });
  }
  document.body.dataset.rendered = 'ok';
})();
