// Network
