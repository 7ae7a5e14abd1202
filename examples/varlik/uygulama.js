document.title += " (trafik)";
