'use strict';
// plotly.js 4.1.1, the traces the scsitrace report draws: bar, pie, scatter (in core) and
// scattergl (WebGL: every I/O of a large trace on one plot).
var Plotly = require('plotly.js/lib/core');
Plotly.register([
    require('plotly.js/lib/bar'),
    require('plotly.js/lib/pie'),
    require('plotly.js/lib/scattergl'),
    require('plotly.js/lib/calendars'),
]);
module.exports = Plotly;
